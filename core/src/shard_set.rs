//! The set of shards a server may generate for (`snowid.shards`), as a bitmap.
//!
//! Written as numbers and ranges, such as `0-1023,4096,5000-5099`. Looking a shard up is one
//! load and a bit test, cheap enough for every `snowid_next` call.

use crate::layout::{MAX_SHARD, SHARD_COUNT};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

const WORDS: usize = SHARD_COUNT / 64;

/// Why a text is not a shard set. Displayed in lowercase words fit for a setting's detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardSetError {
    OutOfRange(i64),
    EmptyItem,
    NotAShard(String),
    Backwards(String),
}

impl fmt::Display for ShardSetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardSetError::OutOfRange(n) => write!(
                f,
                "shard {n} is out of range: shards run from 0 to {MAX_SHARD}"
            ),
            ShardSetError::EmptyItem => write!(
                f,
                "an empty item; write numbers or ranges such as \"0-1023,4096\""
            ),
            ShardSetError::NotAShard(text) => write!(
                f,
                "\"{text}\" is not a shard number or a range such as \"0-1023\""
            ),
            ShardSetError::Backwards(item) => write!(f, "the range \"{item}\" runs backwards"),
        }
    }
}

/// A set of shards, as parsed from text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSet([u64; WORDS]);

impl ShardSet {
    /// Every shard, as text: the setting's compiled-in default (a C string for that reason).
    pub const ALL: &'static std::ffi::CStr = c"0-8191";

    pub fn all() -> ShardSet {
        ShardSet([u64::MAX; WORDS])
    }

    pub fn empty() -> ShardSet {
        ShardSet([0; WORDS])
    }

    /// The set from its bitmap: bit `n % 64` of word `n / 64` is shard `n`.
    pub fn from_words(words: [u64; WORDS]) -> ShardSet {
        ShardSet(words)
    }

    /// The set's bitmap.
    pub fn words(&self) -> &[u64; WORDS] {
        &self.0
    }

    pub fn insert(&mut self, shard: usize) {
        self.0[shard / 64] |= 1 << (shard % 64);
    }

    pub fn remove(&mut self, shard: usize) {
        self.0[shard / 64] &= !(1 << (shard % 64));
    }

    /// The shards in the set, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..SHARD_COUNT).filter(|&shard| self.contains(shard))
    }

    /// Parses a comma-separated list of shard numbers and inclusive ranges. Blank means no
    /// shard. The error says what is wrong, fit for a setting's detail line.
    pub fn parse(text: &str) -> Result<ShardSet, ShardSetError> {
        let mut set = ShardSet::empty();
        if text.trim().is_empty() {
            return Ok(set);
        }
        for item in text.split(',').map(str::trim) {
            let (low, high) = match item.split_once('-') {
                Some((low, high)) => (shard_number(low)?, shard_number(high)?),
                None => (shard_number(item)?, shard_number(item)?),
            };
            if low > high {
                return Err(ShardSetError::Backwards(item.into()));
            }
            for shard in low..=high {
                set.insert(shard);
            }
        }
        Ok(set)
    }

    pub fn contains(&self, shard: usize) -> bool {
        self.0[shard / 64] & (1 << (shard % 64)) != 0
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The shards in either set.
    pub fn union(&self, other: &ShardSet) -> ShardSet {
        ShardSet(std::array::from_fn(|w| self.0[w] | other.0[w]))
    }

    /// The shards in both sets.
    pub fn intersection(&self, other: &ShardSet) -> ShardSet {
        ShardSet(std::array::from_fn(|w| self.0[w] & other.0[w]))
    }

    /// The shards in this set and not in `other`.
    pub fn difference(&self, other: &ShardSet) -> ShardSet {
        ShardSet(std::array::from_fn(|w| self.0[w] & !other.0[w]))
    }

    /// Whether every shard of this set is in `other`.
    pub fn is_subset(&self, other: &ShardSet) -> bool {
        self.difference(other).is_empty()
    }

    /// Whether the two sets have no shard in common.
    pub fn is_disjoint(&self, other: &ShardSet) -> bool {
        self.intersection(other).is_empty()
    }

    /// The `n`-th shard of the set in ascending order, counting from 0, wrapping around: how a
    /// backend picks its own shard from the set by its backend number. `None` for an empty set.
    pub fn nth_wrapping(&self, n: usize) -> Option<usize> {
        let len = self.len();
        if len == 0 {
            return None;
        }
        let mut rank = n % len;
        for (w, &word) in self.0.iter().enumerate() {
            let ones = word.count_ones() as usize;
            if rank < ones {
                let mut word = word;
                for _ in 0..rank {
                    word &= word - 1;
                }
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
            rank -= ones;
        }
        None
    }
}

fn shard_number(text: &str) -> Result<usize, ShardSetError> {
    let text = text.trim();
    match text.parse::<i64>() {
        Ok(n) if (0..=MAX_SHARD as i64).contains(&n) => Ok(n as usize),
        Ok(n) => Err(ShardSetError::OutOfRange(n)),
        Err(_) if text.is_empty() => Err(ShardSetError::EmptyItem),
        Err(_) => Err(ShardSetError::NotAShard(text.into())),
    }
}

/// The canonical text: sorted, merged ranges, such as `0-1023,4096`.
impl fmt::Display for ShardSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut shard = 0;
        while shard < SHARD_COUNT {
            if !self.contains(shard) {
                shard += 1;
                continue;
            }
            let start = shard;
            while shard + 1 < SHARD_COUNT && self.contains(shard + 1) {
                shard += 1;
            }
            let sep = if first { "" } else { "," };
            if start == shard {
                write!(f, "{sep}{start}")?;
            } else {
                write!(f, "{sep}{start}-{shard}")?;
            }
            first = false;
            shard += 1;
        }
        Ok(())
    }
}

/// A shard set that a settings change can replace while generation reads it: the owning
/// process's copy, looked up without a lock.
pub struct LiveShardSet {
    words: [AtomicU64; WORDS],
    /// Whether every shard is in the set, the default: then a lookup is one load.
    all: AtomicBool,
}

impl LiveShardSet {
    pub const fn all() -> LiveShardSet {
        LiveShardSet {
            words: [const { AtomicU64::new(u64::MAX) }; WORDS],
            all: AtomicBool::new(true),
        }
    }

    pub fn replace(&self, set: &ShardSet) {
        self.all.store(false, Relaxed);
        for (word, value) in self.words.iter().zip(set.0) {
            word.store(value, Relaxed);
        }
        self.all.store(set.len() == SHARD_COUNT, Relaxed);
    }

    /// Whether a shard is in the set: a load, or two and a bit test, with no bounds check that
    /// could panic (the mask is a no-op for a shard).
    #[inline(always)]
    pub fn contains(&self, shard: crate::layout::Shard) -> bool {
        let shard = shard.index();
        self.all.load(Relaxed)
            || self.words[(shard / 64) & (WORDS - 1)].load(Relaxed) & (1 << (shard % 64)) != 0
    }

    /// A copy of the set as it is now.
    pub fn snapshot(&self) -> ShardSet {
        ShardSet(std::array::from_fn(|w| self.words[w].load(Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_numbers_and_ranges() {
        let set = ShardSet::parse("0-1023, 4096,5000-5099").unwrap();
        assert_eq!(set.len(), 1024 + 1 + 100);
        assert!(!set.is_empty());
        assert!(set.contains(0) && set.contains(1023) && set.contains(4096) && set.contains(5099));
        assert!(!set.contains(1024) && !set.contains(4095) && !set.contains(5100));
        assert_eq!(set.to_string(), "0-1023,4096,5000-5099");
        assert_eq!(
            ShardSet::parse(ShardSet::ALL.to_str().unwrap()).unwrap(),
            ShardSet::all()
        );
        assert!(ShardSet::parse(" ").unwrap().is_empty());
    }

    #[test]
    fn refuses_malformed_sets_with_a_reason() {
        for (text, reason) in [
            ("8192", "out of range"),
            ("-1", "empty item"),
            ("5-3", "runs backwards"),
            ("1,,2", "empty item"),
            ("a-b", "not a shard number"),
            ("1-2-3", "not a shard number"),
        ] {
            let err = ShardSet::parse(text).expect_err(text).to_string();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn backends_spread_over_the_set_in_order() {
        let set = ShardSet::parse("3,64-65,4096").unwrap();
        let picks: Vec<_> = (0..6).map(|n| set.nth_wrapping(n).unwrap()).collect();
        assert_eq!(picks, [3, 64, 65, 4096, 3, 64]);
        assert_eq!(ShardSet::parse("").unwrap().nth_wrapping(0), None);
        assert_eq!(ShardSet::all().nth_wrapping(8191), Some(8191));
        assert_eq!(ShardSet::all().nth_wrapping(8192 + 5), Some(5));
    }

    #[test]
    fn a_live_set_follows_replacements() {
        let shard = |n| crate::layout::Shard::new(n).unwrap();
        let live = LiveShardSet::all();
        assert!(live.contains(shard(8191)));
        live.replace(&ShardSet::parse("7").unwrap());
        assert!(live.contains(shard(7)) && !live.contains(shard(8191)) && !live.contains(shard(0)));
        assert_eq!(live.snapshot(), ShardSet::parse("7").unwrap());
        live.replace(&ShardSet::all());
        assert!(live.contains(shard(0)) && live.contains(shard(8191)));
        live.replace(&ShardSet::parse("0-8190").unwrap());
        assert!(live.contains(shard(0)) && !live.contains(shard(8191)));
    }

    #[test]
    fn shards_go_in_and_out_and_the_bitmap_round_trips() {
        let mut set = ShardSet::empty();
        set.insert(8191);
        set.insert(64);
        set.insert(64);
        assert_eq!(set.iter().collect::<Vec<_>>(), [64, 8191]);
        assert_eq!(ShardSet::from_words(*set.words()), set);
        set.remove(64);
        set.remove(3);
        assert_eq!(set.iter().collect::<Vec<_>>(), [8191]);
        assert_eq!(set.words()[127], 1 << 63);
    }

    #[test]
    fn sets_combine_as_sets_do() {
        let a = ShardSet::parse("0-9,100").unwrap();
        let b = ShardSet::parse("5-14,8191").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-14,100,8191");
        assert_eq!(a.intersection(&b).to_string(), "5-9");
        assert_eq!(a.difference(&b).to_string(), "0-4,100");
        assert!(!a.is_disjoint(&b) && a.is_disjoint(&ShardSet::parse("10-99").unwrap()));
        assert!(ShardSet::parse("5-9").unwrap().is_subset(&a) && !b.is_subset(&a));
        assert!(ShardSet::empty().is_subset(&a) && ShardSet::empty().is_empty());
    }

    proptest! {
        #[test]
        fn the_canonical_text_parses_back_to_the_same_set(shards in prop::collection::btree_set(0usize..SHARD_COUNT, 0..300)) {
            let text = shards.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
            let set = ShardSet::parse(&text).unwrap();
            prop_assert_eq!(set.len(), shards.len());
            prop_assert_eq!(ShardSet::parse(&set.to_string()).unwrap(), set.clone());
            let in_order: Vec<usize> = shards.iter().copied().collect();
            for (n, shard) in in_order.iter().enumerate() {
                prop_assert_eq!(set.nth_wrapping(n), Some(*shard));
            }
        }

        #[test]
        fn set_operations_agree_with_a_model(
            a in prop::collection::btree_set(0usize..SHARD_COUNT, 0..200),
            b in prop::collection::btree_set(0usize..SHARD_COUNT, 0..200),
        ) {
            let set = |s: &std::collections::BTreeSet<usize>| {
                let mut set = ShardSet::empty();
                s.iter().for_each(|&shard| set.insert(shard));
                set
            };
            let (x, y) = (set(&a), set(&b));
            prop_assert_eq!(x.union(&y), set(&a.union(&b).copied().collect()));
            prop_assert_eq!(x.intersection(&y), set(&a.intersection(&b).copied().collect()));
            prop_assert_eq!(x.difference(&y), set(&a.difference(&b).copied().collect()));
            prop_assert_eq!(x.is_subset(&y), a.is_subset(&b));
            prop_assert_eq!(x.is_disjoint(&y), a.is_disjoint(&b));
            prop_assert_eq!(x.is_empty(), a.is_empty());
        }
    }
}
