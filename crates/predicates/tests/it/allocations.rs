//! The allocations `Texts` promises (issue 20: one allocation per string made the summaries of
//! 50,000 pods a third of the controller's heap): its strings in two allocations of their exact
//! size, however they were pushed. Counted per test thread by `allocation-counter`, which is
//! this test binary's global allocator (a realloc counts as one allocation, as a grown or
//! shrunk buffer is one more for the allocator).

use std::collections::BTreeMap;

use allocation_counter::measure;
use canary_predicates::{Texts, TextsBuilder};

/// Three annotations, so that a reservation of `2 + pairs` strings or of the product of a
/// key's and a value's lengths is wrong.
fn annotations() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "kubevirt.io/install-strategy-identifier".into(),
            "3f2c9e".into(),
        ),
        (
            "kubevirt.io/install-strategy-version".into(),
            "v1.4.0".into(),
        ),
        ("prometheus.io/scrape".into(), "true".into()),
    ])
}

/// A builder with room for exactly `fields`, holding them, as `PodSummary::of` sizes its own.
fn sized_builder(fields: &[&str]) -> TextsBuilder {
    let bytes = fields.iter().map(|field| field.len()).sum();
    let mut builder = TextsBuilder::with_capacity(bytes, fields.len());
    for field in fields {
        builder.push(field);
    }
    builder
}

/// A builder sized for its strings allocates twice, and `build` keeps both buffers.
#[test]
fn strings_pushed_into_a_builder_of_their_size_take_two_allocations() {
    let fields = [
        "kubevirt",
        "virt-handler-x7k2p",
        "0b5e-uid",
        "41",
        "node-07",
    ];
    let mut texts = Texts::default();
    let counted = measure(|| texts = sized_builder(&fields).build());
    assert_eq!(counted.count_total, 2, "{counted:?}");
    assert_eq!(texts.iter().collect::<Vec<_>>(), fields);
}

/// `push_pairs` grows each buffer once to its exact final size: two reallocations, and no
/// shrinking at `build`.
#[test]
fn pairs_pushed_after_the_fields_grow_each_buffer_once() {
    let annotations = annotations();
    let fields = ["kubevirt", "virt-handler-x7k2p"];
    let mut texts = Texts::default();
    let counted = measure(|| {
        let mut builder = sized_builder(&fields);
        builder.push_pairs(&annotations);
        texts = builder.build();
    });
    assert_eq!(counted.count_total, 4, "{counted:?}");
    assert_eq!(counted.count_current, 2, "{counted:?}");
    let pairs: Vec<(&str, &str)> = annotations
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    assert_eq!(texts.pairs(fields.len()).collect::<Vec<_>>(), pairs);
}

/// Pairs alone, into an empty builder: one allocation per buffer, of the exact size.
#[test]
fn pairs_into_an_empty_builder_take_two_allocations() {
    let annotations = annotations();
    let mut texts = Texts::default();
    let counted = measure(|| {
        let mut builder = TextsBuilder::default();
        builder.push_pairs(&annotations);
        texts = builder.build();
    });
    assert_eq!(counted.count_total, 2, "{counted:?}");
    let text_bytes: usize = annotations
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    let ends_bytes = 2 * annotations.len() * std::mem::size_of::<u32>();
    assert_eq!(
        counted.bytes_current,
        i64::try_from(text_bytes + ends_bytes).unwrap(),
        "{counted:?}"
    );
    assert_eq!(texts.len(), 2 * annotations.len());
}
