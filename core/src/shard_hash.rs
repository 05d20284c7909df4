//! The shard of a key: a documented hash that never changes across versions or platforms.
//!
//! ```text
//! shard_for(key) = fnv1a_64(canonical text of key) mod 8192
//! ```
//!
//! - FNV-1a 64: start from 0xcbf29ce484222325; for each byte, xor it in, then multiply by
//!   0x100000001b3 modulo 2^64.
//! - The canonical text of a `bigint` is its decimal form (`-42`), of a `uuid` its lowercase
//!   hyphenated form, of a `text` its bytes as stored (UTF-8 in a UTF-8 database).
//!
//! So a number, a UUID and their text forms land on the same shard, an untyped parameter
//! (which PostgreSQL resolves to `text`) agrees with a typed one, and any language can compute
//! the shard in a few lines. Over sequential integers, UUIDs and e-mail-like strings the shards
//! come out evenly (a chi-squared test per degree of freedom below 1 in the tests).

use crate::layout::SHARD_COUNT;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x100_0000_01b3;

/// The shard of a key's canonical text.
pub fn shard_for_bytes(bytes: &[u8]) -> i32 {
    let hash = bytes.iter().fold(FNV_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    (hash % SHARD_COUNT as u64) as i32
}

/// The shard of a `bigint` key: that of its decimal text.
pub fn shard_for_i64(key: i64) -> i32 {
    let mut buf = [0u8; 20];
    shard_for_bytes(decimal(key, &mut buf))
}

/// The shard of a `uuid` key: that of its lowercase hyphenated text.
pub fn shard_for_uuid(key: &[u8; 16]) -> i32 {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 36];
    let mut at = 0;
    for (i, byte) in key.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text[at] = b'-';
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0xf)];
        at += 2;
    }
    shard_for_bytes(&text)
}

/// Writes `n` in decimal into the end of `buf` and returns that part.
fn decimal(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Pinned values, computed by an independent implementation (a few lines of Python). They
    /// must never change, or keys placed by an earlier version move.
    #[test]
    fn known_values_never_change() {
        assert_eq!(shard_for_bytes(b""), 805);
        assert_eq!(shard_for_bytes(b"a"), 3212);
        assert_eq!(shard_for_bytes(b"hello"), 7435);
        assert_eq!(shard_for_bytes(b"alice@example.com"), 2630);
        assert_eq!(shard_for_i64(0), 7343);
        assert_eq!(shard_for_i64(42), 4643);
        assert_eq!(shard_for_i64(1341), 5582);
        assert_eq!(shard_for_i64(-1), 4395);
        assert_eq!(shard_for_i64(i64::MIN), 2937);
        assert_eq!(shard_for_i64(i64::MAX), 2379);
        let uuid = [
            0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
            0x0a, 0x11,
        ];
        assert_eq!(shard_for_uuid(&uuid), 5487);
    }

    #[test]
    fn a_key_and_its_text_share_a_shard() {
        assert_eq!(shard_for_i64(42), shard_for_bytes(b"42"));
        assert_eq!(shard_for_i64(-7), shard_for_bytes(b"-7"));
        let uuid = [
            0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38,
            0x0a, 0x11,
        ];
        assert_eq!(
            shard_for_uuid(&uuid),
            shard_for_bytes(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
        );
    }

    /// Pearson's chi-squared statistic per degree of freedom of `shards` over all 8,192 shards.
    fn chi_squared_per_df(shards: impl Iterator<Item = i32>) -> f64 {
        let mut counts = vec![0u32; SHARD_COUNT];
        let mut n = 0u32;
        for s in shards {
            counts[s as usize] += 1;
            n += 1;
        }
        let expected = f64::from(n) / SHARD_COUNT as f64;
        let chi: f64 = counts
            .iter()
            .map(|&c| (f64::from(c) - expected).powi(2) / expected)
            .sum();
        chi / (SHARD_COUNT - 1) as f64
    }

    #[test]
    fn keys_spread_evenly() {
        let sequential = chi_squared_per_df((0..200_000).map(shard_for_i64));
        let far = chi_squared_per_df((1_000_000_000_000..1_000_000_200_000).map(shard_for_i64));
        let emails = chi_squared_per_df(
            (0..200_000).map(|i| shard_for_bytes(format!("person{i}@example.com").as_bytes())),
        );
        for (what, chi) in [("sequential", sequential), ("far", far), ("emails", emails)] {
            assert!(chi < 1.2, "{what}: chi-squared per degree of freedom {chi}");
        }
    }

    proptest! {
        #[test]
        fn every_key_lands_on_a_shard_and_integers_hash_their_text(key in any::<i64>()) {
            let shard = shard_for_i64(key);
            prop_assert!((0..SHARD_COUNT as i32).contains(&shard));
            prop_assert_eq!(shard, shard_for_bytes(key.to_string().as_bytes()));
        }

        #[test]
        fn uuids_hash_their_canonical_text(bytes in any::<[u8; 16]>()) {
            let text: String = bytes.iter().enumerate().map(|(i, b)| {
                let dash = if matches!(i, 4 | 6 | 8 | 10) { "-" } else { "" };
                format!("{dash}{b:02x}")
            }).collect();
            prop_assert_eq!(shard_for_uuid(&bytes), shard_for_bytes(text.as_bytes()));
        }
    }
}
