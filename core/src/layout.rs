//! The bit layout of a snowid, Instagram's 41/13/10, as pure checked arithmetic.
//!
//! ```text
//!  63                    23 22          10 9        0
//!  [ 41 bits: ms since epoch ][ 13 bits: shard ][ 10 bits: seq ]
//! ```
//!
//! The top bit of the time field is the sign bit of a `bigint`, so the time field only ever
//! holds values below 2^40 milliseconds (about 34.8 years after the epoch). Past that the
//! generator refuses instead of returning a negative ID.
//!
//! The per-shard state is a *stamp*: `(ms << SEQ_BITS) | seq`. Adding one to a stamp moves to
//! the next sequence number, and past 1,023 carries into the next millisecond, which is exactly
//! the "borrow the next millisecond" rule. An ID is a stamp with the shard spliced in.

/// Bits of the sequence number within one millisecond on one shard.
pub const SEQ_BITS: u32 = 10;
/// Bits of the logical shard number.
pub const SHARD_BITS: u32 = 13;
/// Bits of the time field, counting the sign bit that is never set.
pub const TIME_BITS: u32 = 41;

/// Where the shard field starts.
pub const SHARD_SHIFT: u32 = SEQ_BITS;
/// Where the time field starts.
pub const TIME_SHIFT: u32 = SEQ_BITS + SHARD_BITS;

/// The highest shard number.
pub const MAX_SHARD: i32 = (1 << SHARD_BITS) - 1;
/// How many shards there are.
pub const SHARD_COUNT: usize = 1 << SHARD_BITS;
/// The highest sequence number within one millisecond.
pub const MAX_SEQ: i32 = (1 << SEQ_BITS) - 1;
/// IDs one shard can issue per millisecond.
pub const IDS_PER_MS: u64 = 1 << SEQ_BITS;

/// The highest time field that keeps the sign bit clear: 2^40 - 1 milliseconds.
pub const MAX_MS: u64 = (1 << (TIME_BITS - 1)) - 1;
/// The first instant, in Unix milliseconds, that an epoch can no longer encode: 2^40 ms after
/// it, when the time field would need the sign bit.
pub fn exhaustion_unix_ms(epoch_unix_ms: i64) -> i64 {
    epoch_unix_ms + MAX_MS as i64 + 1
}

/// The highest stamp: the last sequence number of the last usable millisecond.
pub const MAX_STAMP: u64 = (MAX_MS << SEQ_BITS) | MAX_SEQ as u64;

const SHARD_MASK: i64 = MAX_SHARD as i64;
const SEQ_MASK: u64 = MAX_SEQ as u64;

// Every ID the layout can produce is a non-negative i64.
const _: () = assert!(TIME_BITS + SHARD_BITS + SEQ_BITS == 64);
const _: () =
    assert!(((MAX_MS as i128) << TIME_SHIFT) | ((1 << TIME_SHIFT) - 1) == i64::MAX as i128);

/// A shard number known to be within 0..=8191.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard(u16);

impl Shard {
    /// Checks a shard number from SQL.
    pub fn new(shard: i32) -> Option<Shard> {
        (0..=MAX_SHARD)
            .contains(&shard)
            .then_some(Shard(shard as u16))
    }

    pub fn get(self) -> i32 {
        self.0 as i32
    }

    /// The shard's index into the per-shard state.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The decoded parts of an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Milliseconds since the epoch, below 2^40.
    pub ms: u64,
    pub shard: i32,
    pub seq: i32,
}

/// A stamp: the time and sequence parts of an ID, `(ms << SEQ_BITS) | seq`.
pub fn stamp(ms: u64, seq: u64) -> u64 {
    (ms << SEQ_BITS) | (seq & SEQ_MASK)
}

/// The millisecond of a stamp.
pub fn stamp_ms(stamp: u64) -> u64 {
    stamp >> SEQ_BITS
}

/// Builds the ID for a stamp on a shard. The caller guarantees `stamp <= MAX_STAMP`.
pub fn id_from_stamp(stamp: u64, shard: Shard) -> i64 {
    debug_assert!(stamp <= MAX_STAMP);
    let ms = (stamp >> SEQ_BITS) as i64;
    let seq = (stamp & SEQ_MASK) as i64;
    (ms << TIME_SHIFT) | ((shard.0 as i64) << SHARD_SHIFT) | seq
}

/// Builds an ID from its parts, or `None` when a part does not fit its field.
pub fn compose(ms: u64, shard: i32, seq: i32) -> Option<i64> {
    let shard = Shard::new(shard)?;
    if ms > MAX_MS || !(0..=MAX_SEQ).contains(&seq) {
        return None;
    }
    Some(id_from_stamp(stamp(ms, seq as u64), shard))
}

/// Splits an ID into its parts, or `None` for a negative ID, which snowid never issues.
pub fn decompose(id: i64) -> Option<Parts> {
    if id < 0 {
        return None;
    }
    Some(Parts {
        ms: (id >> TIME_SHIFT) as u64,
        shard: ((id >> SHARD_SHIFT) & SHARD_MASK) as i32,
        seq: (id as u64 & SEQ_MASK) as i32,
    })
}

/// The ID a key stored as text holds: decimal digits only, as `snowid_text` writes them, at most
/// `i64::MAX`; with `numeric`, a fraction of zeros may follow (as `numeric`'s output writes a
/// scale). Anything else (a sign, spaces, other digits, an exponent) is not an ID.
pub fn id_from_digits(text: &str, numeric: bool) -> Option<i64> {
    let digits = match text.split_once('.') {
        Some((whole, fraction)) if numeric && fraction.bytes().all(|b| b == b'0') => whole,
        Some(_) => return None,
        None => text,
    };
    if digits.is_empty() || digits.len() > 19 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {

    #[test]
    fn only_decimal_digits_of_an_id_are_an_id() {
        assert_eq!(id_from_digits("0", false), Some(0));
        assert_eq!(id_from_digits("9223372036854775807", false), Some(i64::MAX));
        for not in [
            "",
            "9223372036854775808",
            "-1",
            "+1",
            " 1",
            "1 ",
            "1e3",
            "0x10",
            "١٢",
        ] {
            assert_eq!(id_from_digits(not, false), None, "{not:?}");
        }
        assert_eq!(id_from_digits("12.000", true), Some(12));
        assert_eq!(id_from_digits("12.5", true), None);
        assert_eq!(id_from_digits("12.000", false), None, "text is digits only");
        assert_eq!(id_from_digits("NaN", true), None);
    }
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_last_stamp_on_the_last_shard_is_the_largest_bigint() {
        assert_eq!(MAX_STAMP, stamp(MAX_MS, MAX_SEQ as u64));
        assert_eq!(IDS_PER_MS, 1024);
        assert_eq!(stamp_ms(MAX_STAMP), MAX_MS);
        let last = Shard::new(MAX_SHARD).unwrap();
        assert_eq!(last.get(), MAX_SHARD);
        assert_eq!(Shard::new(5).map(Shard::get), Some(5));
        assert_eq!(id_from_stamp(MAX_STAMP, last), i64::MAX);
    }

    #[test]
    fn the_layout_matches_instagrams_formula() {
        // id = (ms << 23) | (shard << 10) | seq, as published.
        let id = compose(1_387_263_000, 1341, 7).unwrap();
        assert_eq!(id, (1_387_263_000_i64 << 23) | (1341 << 10) | 7);
    }

    #[test]
    fn the_largest_id_is_i64_max_and_positive() {
        assert_eq!(compose(MAX_MS, MAX_SHARD, MAX_SEQ), Some(i64::MAX));
        assert_eq!(
            compose(MAX_MS + 1, 0, 0),
            None,
            "2^40 ms would set the sign bit"
        );
    }

    #[test]
    fn out_of_range_parts_are_refused() {
        assert_eq!(compose(0, -1, 0), None);
        assert_eq!(compose(0, 8192, 0), None);
        assert_eq!(compose(0, i32::MAX, 0), None);
        assert_eq!(compose(0, 0, -1), None);
        assert_eq!(compose(0, 0, 1024), None);
        assert_eq!(decompose(-1), None);
        assert_eq!(
            decompose(0),
            Some(Parts {
                ms: 0,
                shard: 0,
                seq: 0
            }),
            "zero is a valid ID: the first of shard 0 in the epoch's first millisecond"
        );
        assert_eq!(decompose(i64::MIN), None);
    }

    #[test]
    fn a_stamp_carries_into_the_next_millisecond_past_1023() {
        let last = stamp(41, 1023);
        assert_eq!(stamp_ms(last + 1), 42);
        assert_eq!(
            decompose(id_from_stamp(last + 1, Shard::new(3).unwrap()))
                .unwrap()
                .seq,
            0
        );
    }

    proptest! {
        #[test]
        fn compose_and_decompose_round_trip(ms in 0..=MAX_MS, shard in 0..=MAX_SHARD, seq in 0..=MAX_SEQ) {
            let id = compose(ms, shard, seq).unwrap();
            prop_assert!(id >= 0);
            prop_assert_eq!(decompose(id), Some(Parts { ms, shard, seq }));
        }

        #[test]
        fn ids_on_one_shard_sort_like_their_stamps(a in 0..=MAX_STAMP, b in 0..=MAX_STAMP, shard in 0..=MAX_SHARD) {
            let shard = Shard::new(shard).unwrap();
            prop_assert_eq!(a.cmp(&b), id_from_stamp(a, shard).cmp(&id_from_stamp(b, shard)));
        }

        #[test]
        fn every_non_negative_id_decodes_and_recomposes(id in 0..=i64::MAX) {
            let p = decompose(id).unwrap();
            prop_assert_eq!(compose(p.ms, p.shard, p.seq), Some(id));
        }
    }
}
