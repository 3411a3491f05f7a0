//! Deterministic stand-ins for the random parts of new objects: the `generateName` suffix and
//! the uid. Kubernetes draws both at random; here they come from a counter through a mixing
//! function, so that the same run gives the same names.

/// The 5-character suffix `generateName` appends for the `counter`-th generated name, from
/// Kubernetes' alphabet (no vowels, no look-alikes:
/// `staging/src/k8s.io/apimachinery/pkg/util/rand/rand.go`).
pub(super) fn suffix(counter: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bits = splitmix64(counter);
    (0..5)
        .filter_map(|_| {
            let index = (bits % ALPHABET.len() as u64) as usize;
            bits /= ALPHABET.len() as u64;
            ALPHABET.get(index).map(|b| char::from(*b))
        })
        .collect()
}

/// A deterministic, UUID-shaped uid derived from the creating resourceVersion and the store's
/// uid salt (0 unless [`Store::salt_uids`](super::Store::salt_uids) set one: the uids of
/// every store without a salt are the same for the same run).
pub(super) fn uid_for(resource_version: u64, salt: u64) -> String {
    let mixed = if salt == 0 {
        resource_version
    } else {
        resource_version ^ splitmix64(salt)
    };
    let bits = splitmix64(mixed);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        bits >> 32,
        (bits >> 16) & 0xffff,
        bits & 0xfff,
        (resource_version >> 48) & 0xfff,
        resource_version & 0xffff_ffff_ffff
    )
}

fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
