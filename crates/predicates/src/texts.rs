//! [`Texts`]: a list of short strings kept in two allocations, one text holding them all and
//! the end of each in it, with a lookup of key/value pairs stored in key order.
//!
//! Why: a controller's caches hold thousands of small strings per kind of object (a pod's name,
//! UID, owner and annotations; a node's labels). As one `String` or `Box<str>` each, every one
//! is an allocation with its own rounding, and a `BTreeMap<String, String>` of labels is a tree
//! node of eleven slots on top: on 50,000 pods and 5,000 nodes that was most of the
//! controller's heap (issue 20, docs/benchmarks.md). [`PodSummary`](crate::PodSummary) and the
//! adapter's node cache keep their strings here instead.
//!
//! Invariant: a [`Texts`] built from a list of strings gives back exactly that list. The
//! offsets are `u32`: the API server refuses objects of more than a few MiB, far below 4 GiB; a
//! string that would end past `u32::MAX` is stored empty, so that every index still names the
//! string pushed at that position.

use std::collections::BTreeMap;

/// Strings, each read back by its position.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Texts {
    /// Every string, one after the other.
    text: Box<str>,
    /// Where string `i` ends in `text` (it starts where string `i - 1` ends, or at 0).
    ends: Box<[u32]>,
}

impl Texts {
    /// The strings of `items`, in order.
    pub fn of<'a>(items: impl IntoIterator<Item = &'a str>) -> Self {
        let mut builder = TextsBuilder::default();
        for item in items {
            builder.push(item);
        }
        builder.build()
    }

    /// How many strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&str> {
        let start = match index.checked_sub(1) {
            None => 0,
            Some(previous) => *self.ends.get(previous)?,
        };
        let end = *self.ends.get(index)?;
        self.text.get(start as usize..end as usize)
    }

    /// Every string, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|index| self.get(index))
    }

    /// Strings `from`, `from + 1`, ... read as key/value pairs (`from` a key, `from + 1` its
    /// value, ...), keys in ascending order: the value of `key`, by a binary search.
    pub fn pair_value(&self, from: usize, key: &str) -> Option<&str> {
        let pairs = self.len().saturating_sub(from) / 2;
        let (mut low, mut high) = (0, pairs);
        while low < high {
            let middle = low + (high - low) / 2;
            let candidate = self.get(from + 2 * middle)?;
            match candidate.cmp(key) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return self.get(from + 2 * middle + 1),
            }
        }
        None
    }

    /// Strings `from`, `from + 1`, ... as key/value pairs, in order.
    /// A key left without a value (an odd count) is not a pair.
    pub fn pairs(&self, from: usize) -> impl Iterator<Item = (&str, &str)> {
        let mut strings = self.iter().skip(from);
        std::iter::from_fn(move || Some((strings.next()?, strings.next()?)))
    }
}

impl std::fmt::Debug for Texts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Builds a [`Texts`] one string at a time.
#[derive(Debug, Default)]
pub struct TextsBuilder {
    text: String,
    ends: Vec<u32>,
}

impl TextsBuilder {
    /// A builder with room for `bytes` of text in `count` strings.
    pub fn with_capacity(bytes: usize, count: usize) -> Self {
        Self {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(count),
        }
    }

    /// Appends `item` (empty if it would end past `u32::MAX`, see the module's invariant).
    pub fn push(&mut self, item: &str) {
        let end = u32::try_from(self.text.len() + item.len());
        if let Ok(end) = end {
            self.text.push_str(item);
            self.ends.push(end);
        } else {
            let unchanged = u32::try_from(self.text.len()).unwrap_or(u32::MAX);
            self.ends.push(unchanged);
        }
    }

    /// Appends the keys and values of `map`, one pair after the other in key order, as
    /// [`Texts::pair_value`] and [`Texts::pairs`] read them back (a `BTreeMap`, as labels and
    /// annotations are decoded, so the order is the type's), with the exact room reserved.
    pub fn push_pairs(&mut self, map: &BTreeMap<String, String>) {
        self.text
            .reserve_exact(map.iter().map(|(key, value)| key.len() + value.len()).sum());
        self.ends.reserve_exact(2 * map.len());
        for (key, value) in map {
            self.push(key);
            self.push(value);
        }
    }

    /// The strings pushed, in two allocations of their exact size.
    pub fn build(self) -> Texts {
        Texts {
            text: self.text.into_boxed_str(),
            ends: self.ends.into_boxed_slice(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What goes in comes back: every position, in order, empty strings included.
    #[test]
    fn texts_give_back_what_was_pushed() {
        for items in [
            &[][..],
            &[""][..],
            &["a"][..],
            &["", "x", "", "yz", ""][..],
            &[
                "default",
                "node-exporter-abcde",
                "3f2c-uid",
                "42",
                "node-00042",
            ][..],
        ] {
            let texts = Texts::of(items.iter().copied());
            assert_eq!(texts.len(), items.len());
            assert_eq!(texts.is_empty(), items.is_empty());
            assert_eq!(texts.iter().collect::<Vec<_>>(), items);
            for (index, item) in items.iter().enumerate() {
                assert_eq!(texts.get(index), Some(*item));
            }
            assert_eq!(texts.get(items.len()), None);
        }
    }

    /// Pairs after a prefix of other strings are found by key, present or not, and listed in
    /// order.
    #[test]
    fn pairs_are_found_by_key_after_the_fields() {
        let pairs = [
            ("a", "1"),
            ("b", ""),
            ("kubevirt.io/install-strategy", "v1"),
            ("z", "26"),
        ];
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut builder = TextsBuilder::with_capacity(14, 2);
        builder.push("field-0");
        builder.push("field-1");
        builder.push_pairs(&map);
        let texts = builder.build();
        assert_eq!(texts.len(), 2 + 2 * pairs.len());
        assert_eq!(texts.pairs(2).collect::<Vec<_>>(), pairs);
        for (key, value) in pairs {
            assert_eq!(texts.pair_value(2, key), Some(value), "{key}");
        }
        for absent in ["", "0", "aa", "c", "kubevirt.io/", "zz", "field-0"] {
            assert_eq!(texts.pair_value(2, absent), None, "{absent}");
        }
        let items = texts.len();
        assert_eq!(texts.pair_value(items, "a"), None);
        assert_eq!(texts.pair_value(items + 3, "a"), None);
        assert_eq!(texts.pairs(items).count(), 0);
        assert_eq!(texts.pairs(items + 3).count(), 0);
        // Read from the second field, the last value is a key without one: not a pair.
        assert_eq!(
            texts.pairs(1).collect::<Vec<_>>(),
            [
                ("field-1", "a"),
                ("1", "b"),
                ("", "kubevirt.io/install-strategy"),
                ("v1", "z")
            ]
        );
    }

    /// `Debug` lists the strings, as a `Vec<&str>` would.
    #[test]
    fn debug_lists_the_strings() {
        assert_eq!(
            format!("{:?}", Texts::of(["a", "", "b c"])),
            r#"["a", "", "b c"]"#
        );
        assert_eq!(format!("{:?}", Texts::default()), "[]");
    }
}
