//! The records of the shards a cluster released, kept beside its durable state: the cluster's
//! witness (`global/9129`), which lists the shards, and each database's record (the extension's
//! table `snowid_released_shards`), which lists them with their last IDs. They carry a release
//! through every route that re-creates the state: a lost or damaged `global/9128` (the witness
//! survives it, and the databases do), and `pg_upgrade` (which carries the databases' tables and
//! none of the cluster's own files). This module holds the rules; the server writes.
//!
//! # A record never says less than the state
//!
//! Every record lists at least every shard the durable state holds released, each at a last ID
//! at or above the state's, or says that it knows nothing ([`Record::Unknown`]): so whatever
//! record survives, a fence that lifts with it releases again every shard the cluster released.
//! Each change keeps that true at every step, and a failure or a crash part way leaves records
//! that say more than the state (a shard listed that is not released), never less:
//!
//! - a release: the shard stops issuing here first (its last ID is fixed from then on), then
//!   every record lists it, then the release is made durable;
//! - a take-back: the take-back is made durable first, then every record drops the shard;
//! - a fence lift: every shard any record or the witness lists is released again, durably, then
//!   the resume lifts the fence, then every record lists what the state now holds;
//! - an install (`CREATE EXTENSION`, or an update that adds the table): its database's record is
//!   written from the state at commit, or left empty (unknown) where the state is fenced.
//!
//! The server orders these with one cluster-wide lock, so that no two interleave, and an install
//! that commits while a release runs either finishes before the release reads the databases or
//! writes its record after the release is made.
//!
//! # Which record wins
//!
//! None: at a fence lift, every shard any record lists is released again, at the highest last ID
//! any of them gives ([`to_release_again`]). A record that says more than the state at worst
//! keeps a shard released that was taken back (or never released), which a take-back corrects; a
//! record that said less would issue a shard another server owns.

use crate::layout::{self, Shard, MAX_SEQ};
use crate::shard_set::ShardSet;
use std::collections::BTreeMap;

/// The released shards a record lists, each with the last ID it was released at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released(BTreeMap<Shard, i64>);

impl Released {
    /// From (shard, last ID) pairs as a record stores them; pairs naming no shard are left out,
    /// and a shard listed twice keeps its higher last ID.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (i32, i64)>) -> Released {
        let mut released = Released::default();
        for (shard, last_id) in pairs {
            if let Some(shard) = Shard::new(shard) {
                released.add(shard, last_id);
            }
        }
        released
    }

    /// The (shard, last ID) pairs, in shard order.
    pub fn pairs(&self) -> Vec<(i32, i64)> {
        self.0.iter().map(|(s, &id)| (s.get(), id)).collect()
    }

    /// Lists `shard` at `last_id`, or at the higher last ID it is listed at already.
    pub fn add(&mut self, shard: Shard, last_id: i64) {
        let at = self.0.entry(shard).or_insert(last_id);
        *at = (*at).max(last_id);
    }

    /// This list with `shard` released at `last_id`: what a release records.
    pub fn with(&self, shard: Shard, last_id: i64) -> Released {
        let mut released = self.clone();
        released.add(shard, last_id);
        released
    }

    /// Every shard either lists, each at the higher last ID.
    pub fn union(&self, other: &Released) -> Released {
        let mut released = self.clone();
        for (&shard, &last_id) in &other.0 {
            released.add(shard, last_id);
        }
        released
    }

    pub fn contains(&self, shard: Shard) -> bool {
        self.0.contains_key(&shard)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The shards, without their last IDs: what the cluster's witness lists.
    pub fn shard_set(&self) -> ShardSet {
        let mut set = ShardSet::empty();
        for shard in self.0.keys() {
            set.insert(shard.index());
        }
        set
    }

    /// Every shard with its last ID, in shard order.
    pub fn iter(&self) -> impl Iterator<Item = (Shard, i64)> + '_ {
        self.0.iter().map(|(&s, &id)| (s, id))
    }
}

/// What one database records of the cluster's released shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Every shard the cluster had released when the record was last written (and possibly
    /// more; see the top of this module).
    Listed(Released),
    /// Nothing, and why (snowid installed while the cluster was fenced, a version that keeps no
    /// record, snowid not installed).
    Unknown(String),
}

/// No record, witness or superuser says which shards were released: lifting the fence could
/// issue a shard handed to another server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoneKnown;

/// The shards a fence lift releases again, each at its last ID: every one a record lists (at
/// the highest last ID any gives), the witness lists, or the superuser names (`named`, where the
/// superuser says which). A shard whose last ID nothing gives, or gives as an ID of another
/// shard, is released at the last ID of its own in the millisecond of `above` (the ID the fence
/// lifts above, which is at or above every key the databases hold), so that its next owner
/// resumes above every such key. Refuses where nothing is known and nothing is named.
pub fn to_release_again(
    records: &[&Record],
    witness: Option<&ShardSet>,
    named: Option<&[Shard]>,
    above: i64,
) -> Result<Vec<(Shard, i64)>, NoneKnown> {
    let listed: Vec<&Released> = records
        .iter()
        .filter_map(|r| match r {
            Record::Listed(released) => Some(released),
            Record::Unknown(_) => None,
        })
        .collect();
    if listed.is_empty() && witness.is_none() && named.is_none() {
        return Err(NoneKnown);
    }
    let mut all = listed
        .into_iter()
        .fold(Released::default(), |all, r| all.union(r));
    let unrecorded = witness
        .into_iter()
        .flat_map(|set| set.iter().filter_map(|n| Shard::new(n as i32)))
        .chain(named.unwrap_or_default().iter().copied());
    for shard in unrecorded {
        all.add(shard, 0);
    }
    let above_ms = layout::decompose(above).map_or(0, |p| p.ms);
    Ok(all
        .iter()
        .map(|(shard, last_id)| {
            let own = matches!(layout::decompose(last_id), Some(p) if p.shard == shard.get());
            let last_id = match own && last_id > 0 {
                true => last_id,
                false => layout::compose(above_ms, shard.get(), MAX_SEQ).unwrap_or(0),
            };
            (shard, last_id)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shard(n: i32) -> Shard {
        Shard::new(n).unwrap()
    }

    #[test]
    fn a_union_keeps_every_shard_at_its_highest_last_id() {
        let a = Released::from_pairs([(7, 100), (9, 5)]);
        let b = Released::from_pairs([(7, 150), (3, 1), (9000, 4), (-1, 4)]);
        assert_eq!(a.union(&b).pairs(), vec![(3, 1), (7, 150), (9, 5)]);
        assert_eq!(a.with(shard(7), 90).pairs(), vec![(7, 100), (9, 5)]);
    }

    #[test]
    fn a_fence_lift_releases_every_shard_any_record_lists() {
        let id = |ms, s| layout::compose(ms, s, 3).unwrap();
        let above = id(5_000, 1);
        let a = Record::Listed(Released::from_pairs([(7, id(4_000, 7))]));
        let b = Record::Listed(Released::from_pairs([(7, id(4_500, 7)), (8, id(10, 8))]));
        let unknown = Record::Unknown("installed while fenced".into());
        let mut witness = ShardSet::empty();
        witness.insert(9);
        let again = to_release_again(&[&a, &unknown, &b], Some(&witness), None, above).unwrap();
        let at_above = |s| layout::compose(5_000, s, MAX_SEQ).unwrap();
        assert_eq!(
            again,
            vec![
                (shard(7), id(4_500, 7)),
                (shard(8), id(10, 8)),
                (shard(9), at_above(9))
            ]
        );
        // A named shard, and a last ID of another shard, are released at above's millisecond.
        let wrong = Record::Listed(Released::from_pairs([(5, id(4_000, 6))]));
        let again = to_release_again(&[&wrong], None, Some(&[shard(2)]), above).unwrap();
        assert_eq!(
            again,
            vec![(shard(2), at_above(2)), (shard(5), at_above(5))]
        );
    }

    #[test]
    fn nothing_known_refuses_and_an_empty_list_is_knowledge() {
        let unknown = Record::Unknown("why".into());
        assert_eq!(to_release_again(&[&unknown], None, None, 1), Err(NoneKnown));
        assert_eq!(to_release_again(&[], None, Some(&[]), 1), Ok(vec![]));
        let none = Record::Listed(Released::default());
        assert_eq!(to_release_again(&[&none], None, None, 1), Ok(vec![]));
        assert_eq!(
            to_release_again(&[], Some(&ShardSet::empty()), None, 1),
            Ok(vec![])
        );
    }

    proptest! {
        #[test]
        fn a_fence_lift_never_releases_less_than_any_record(
            lists in proptest::collection::vec(
                proptest::collection::vec((0i32..16, 1u64..1_000), 0..6), 1..5),
            above_ms in 1_000u64..2_000,
        ) {
            let records: Vec<Record> = lists
                .iter()
                .map(|l| Record::Listed(Released::from_pairs(
                    l.iter().map(|&(s, ms)| (s, layout::compose(ms, s, 1).unwrap())))))
                .collect();
            let refs: Vec<&Record> = records.iter().collect();
            let above = layout::compose(above_ms, 0, 0).unwrap();
            let again = to_release_again(&refs, None, None, above).unwrap();
            for record in &records {
                let Record::Listed(released) = record else { unreachable!() };
                for (s, last_id) in released.iter() {
                    let (_, at) = again.iter().find(|(a, _)| *a == s).expect("released again");
                    prop_assert!(*at >= last_id);
                }
            }
        }
    }
}
