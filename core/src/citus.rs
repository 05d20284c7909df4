//! Shards on Citus with no configuration: each node's own set follows from its Citus group, and
//! a node refuses every shard another node also claims.
//!
//! Citus puts each primary node in a group of its own (the coordinator is group 0), numbered from
//! a sequence that never hands out a number twice; a worker's streaming standbys share its group.
//! Group `g` gets the block of [`SHARDS_PER_GROUP`] shards from `g * SHARDS_PER_GROUP` ([`block`]):
//! [`GROUPS`] groups, 0 to 255, fit in the 8,192 shards, and no two blocks share a shard. A group
//! past them has no block: its node generates nothing until `snowid.shards` gives it a set, and
//! it never wraps onto another group's block.
//!
//! A node's *claim* ([`claim`]) is its group's block while `snowid.shards` is left at every shard
//! (its default), and the set `snowid.shards` names otherwise. [`check`] takes one node's claim
//! and the other groups' claims and returns the shards that node may generate for: its claim less
//! every shard another group claims. A node learns each other node's claim from that node's
//! [`Answer`]; one that does not answer is taken to claim its group's block. Two nodes whose claims
//! overlap each refuse the shards they share, whichever checks first, so the shards they generate
//! for are disjoint whatever they claim (see the property tests).

use crate::layout::SHARD_COUNT;
use crate::shard_set::ShardSet;
use std::fmt;

/// How many shards each Citus group gets.
pub const SHARDS_PER_GROUP: usize = 32;

/// How many groups get a block: groups 0 to `GROUPS - 1`.
pub const GROUPS: usize = SHARD_COUNT / SHARDS_PER_GROUP;

/// The shards of a group's block, or `None` for a group past [`GROUPS`] (or a negative one).
pub fn block(group: i32) -> Option<ShardSet> {
    let group = usize::try_from(group).ok().filter(|&g| g < GROUPS)?;
    let mut set = ShardSet::empty();
    (group * SHARDS_PER_GROUP..(group + 1) * SHARDS_PER_GROUP).for_each(|shard| set.insert(shard));
    Some(set)
}

/// Whether `snowid.shards` names the shards by hand: anything but every shard, its default.
pub fn by_hand(configured: &ShardSet) -> bool {
    configured.len() != SHARD_COUNT
}

/// What a node claims: its group's block (none past [`GROUPS`]) while `snowid.shards` is at every
/// shard, else the set it names.
pub fn claim(configured: &ShardSet, group: i32) -> ShardSet {
    if by_hand(configured) {
        configured.clone()
    } else {
        block(group).unwrap_or_else(ShardSet::empty)
    }
}

/// What a node tells another that checks against it: whether its claim is set by hand, and the
/// shards it claims beyond its group's block (set by hand: every shard it claims). The shards it
/// generates for now count too, so that a node whose claim is changing reports the old claim as
/// well as the new until it has checked the new one.
///
/// A node that claims its group's block does not name it: the one that asks takes the group from
/// Citus's own record of the nodes, which is right even while the answering node has not yet
/// heard which group it joined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub by_hand: bool,
    pub shards: ShardSet,
}

impl Answer {
    /// The answer of a node in `local_group` (as it knows its group), with `snowid.shards` at
    /// `configured`, that generates for `generating` now.
    pub fn of(configured: &ShardSet, local_group: i32, generating: &ShardSet) -> Answer {
        if by_hand(configured) {
            Answer {
                by_hand: true,
                shards: configured.union(generating),
            }
        } else {
            Answer {
                by_hand: false,
                shards: generating.difference(&block(local_group).unwrap_or_else(ShardSet::empty)),
            }
        }
    }

    /// What the node claims, in the group Citus's record of the nodes gives it.
    pub fn claim(&self, group: i32) -> ShardSet {
        match self.by_hand {
            true => self.shards.clone(),
            false => claim(&ShardSet::all(), group).union(&self.shards),
        }
    }

    /// Reads an answer as [`Answer`]'s text writes it: `group:` or `hand:`, then a shard set.
    pub fn parse(text: &str) -> Result<Answer, String> {
        let (mode, shards) = text
            .split_once(':')
            .ok_or_else(|| format!("\"{text}\" is not a snowid node's answer"))?;
        let by_hand = match mode {
            "group" => false,
            "hand" => true,
            _ => return Err(format!("\"{text}\" is not a snowid node's answer")),
        };
        let shards = ShardSet::parse(shards).map_err(|e| e.to_string())?;
        Ok(Answer { by_hand, shards })
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.by_hand { "hand" } else { "group" };
        write!(f, "{mode}:{}", self.shards)
    }
}

/// Another node, as a check sees it: its group in Citus's record, and its answer, if it gave one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub group: i32,
    pub answer: Option<Answer>,
}

impl Peer {
    /// What the node claims; one that did not answer is taken to claim its group's block.
    pub fn claim(&self) -> ShardSet {
        match &self.answer {
            Some(answer) => answer.claim(self.group),
            None => claim(&ShardSet::all(), self.group),
        }
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The shards the node may generate for.
    pub generating: ShardSet,
    /// For each peer, in order, the shards of the node's claim that the peer claims too (none for
    /// a peer in the node's own group: a standby or an old primary of the same node).
    pub shared: Vec<ShardSet>,
}

impl Verdict {
    /// Every shard of the claim that some other group claims too.
    pub fn refused(&self) -> ShardSet {
        self.shared
            .iter()
            .fold(ShardSet::empty(), |all, shared| all.union(shared))
    }
}

/// The shards a node in `group` that claims `claim` may generate for, against the other nodes.
pub fn check(group: i32, claim: &ShardSet, peers: &[Peer]) -> Verdict {
    let shared: Vec<ShardSet> = peers
        .iter()
        .map(|peer| match peer.group == group {
            true => ShardSet::empty(),
            false => claim.intersection(&peer.claim()),
        })
        .collect();
    let mut verdict = Verdict {
        generating: ShardSet::empty(),
        shared,
    };
    verdict.generating = claim.difference(&verdict.refused());
    verdict
}

/// Whether a node's last check is out of date against the claim another group's node makes now:
/// the node refuses less of that claim than it shares (`refused` is every shard the node refuses,
/// `refused_for_them` those it refuses for that group), or refuses for that group a shard it no
/// longer claims. The node then checks again. A node's state right after checking against a
/// claim is never out of date against that same claim, so two nodes that tell each other their
/// claims do not make each other check again and again.
pub fn out_of_date(
    claim: &ShardSet,
    refused: &ShardSet,
    refused_for_them: &ShardSet,
    their_claim: &ShardSet,
) -> bool {
    let shared = claim.intersection(their_claim);
    !shared.is_subset(refused) || !refused_for_them.is_subset(&shared)
}

/// The blocks of groups that no node is in and that no claim touches: shards that a node past
/// [`GROUPS`], or one set by hand, could take without overlapping anyone today.
pub fn free_blocks<'a>(
    groups: impl IntoIterator<Item = i32>,
    claims: impl IntoIterator<Item = &'a ShardSet>,
) -> ShardSet {
    let mut free = ShardSet::all();
    for group in groups {
        if let Some(taken) = block(group) {
            free = free.difference(&taken);
        }
    }
    for claim in claims {
        free = free.difference(claim);
    }
    // Whole blocks only: a future node of that group would claim the whole block.
    (0..GROUPS as i32)
        .filter_map(block)
        .filter(|b| b.is_subset(&free))
        .fold(ShardSet::empty(), |all, b| all.union(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(text: &str) -> ShardSet {
        ShardSet::parse(text).unwrap()
    }

    #[test]
    fn each_group_gets_a_block_of_its_own_up_to_the_capacity() {
        assert_eq!(GROUPS, 256);
        assert_eq!(block(0).unwrap().to_string(), "0-31");
        assert_eq!(block(1).unwrap().to_string(), "32-63");
        assert_eq!(block(255).unwrap().to_string(), "8160-8191");
        assert_eq!(
            block(256),
            None,
            "past the capacity: no block, never a wrap"
        );
        assert_eq!(block(-1), None);
        let mut covered = ShardSet::empty();
        for group in 0..GROUPS as i32 {
            let b = block(group).unwrap();
            assert_eq!(b.len(), SHARDS_PER_GROUP);
            assert!(
                b.is_disjoint(&covered),
                "group {group} overlaps an earlier one"
            );
            covered = covered.union(&b);
        }
        assert_eq!(covered, ShardSet::all());
    }

    #[test]
    fn the_default_claims_the_groups_block_and_anything_else_is_by_hand() {
        assert_eq!(claim(&ShardSet::all(), 2), block(2).unwrap());
        assert_eq!(claim(&ShardSet::all(), 300), ShardSet::empty());
        assert_eq!(claim(&set("5-9"), 2), set("5-9"));
        assert_eq!(claim(&set("0-8190"), 2), set("0-8190"));
        assert!(!by_hand(&ShardSet::all()) && by_hand(&set("")) && by_hand(&set("1")));
    }

    #[test]
    fn answers_round_trip_and_say_what_the_node_claims() {
        for text in ["group:", "group:7", "hand:0-99,4096", "hand:"] {
            assert_eq!(Answer::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "group", "all:1", "hand:x", "hand:9000"] {
            assert!(Answer::parse(bad).is_err(), "{bad}");
        }
        // A node of group 1 that still generates for 5 (its old set by hand) claims both.
        let moving = Answer::of(&ShardSet::all(), 1, &set("5,32-40"));
        assert_eq!(moving.to_string(), "group:5");
        assert_eq!(moving.claim(1), set("5,32-63"));
        // A node that has not yet heard its group (Citus sets it while adding the node) is taken
        // in the group Citus's record gives it.
        assert_eq!(
            Answer::of(&ShardSet::all(), 0, &set("")).claim(3),
            block(3).unwrap()
        );
        let hand = Answer::of(&set("100-110"), 1, &set("32-63"));
        assert_eq!(hand.claim(1), set("32-63,100-110"));
        let silent = Peer {
            group: 2,
            answer: None,
        };
        assert_eq!(silent.claim(), block(2).unwrap());
    }

    #[test]
    fn a_node_refuses_what_another_claims_and_keeps_the_rest() {
        let peers = [
            Peer {
                group: 0,
                answer: None,
            },
            Peer {
                group: 2,
                answer: Some(Answer::parse("hand:40-49,70").unwrap()),
            },
            // The node's own group: a standby, or the old primary it replaced.
            Peer {
                group: 1,
                answer: Some(Answer::parse("group:").unwrap()),
            },
        ];
        let verdict = check(1, &block(1).unwrap(), &peers);
        assert_eq!(verdict.generating, set("32-39,50-63"));
        assert_eq!(verdict.shared, [set(""), set("40-49"), set("")]);
        assert_eq!(verdict.refused(), set("40-49"));
        // Set by hand into group 0's block: refused even though the coordinator did not answer.
        let verdict = check(1, &set("20-40"), &peers);
        assert_eq!(verdict.generating, set("32-39"));
        assert_eq!(verdict.shared[0], set("20-31"));
    }

    #[test]
    fn a_check_is_out_of_date_when_the_other_claim_changes() {
        let mine = block(2).unwrap();
        let theirs = set("64-70");
        let verdict = check(
            2,
            &mine,
            &[Peer {
                group: 1,
                answer: Some(Answer::parse("hand:64-70").unwrap()),
            }],
        );
        let (refused, for_them) = (verdict.refused(), verdict.shared[0].clone());
        assert!(!out_of_date(&mine, &refused, &for_them, &theirs));
        // They claim more, or give the shards back: check again.
        assert!(out_of_date(&mine, &refused, &for_them, &set("64-80")));
        assert!(out_of_date(&mine, &refused, &for_them, &block(1).unwrap()));
        // Never checked against them, and no overlap: nothing to do.
        assert!(!out_of_date(&mine, &set(""), &set(""), &block(1).unwrap()));
    }

    #[test]
    fn free_blocks_are_whole_blocks_no_group_or_claim_has() {
        let free = free_blocks([0, 1, 3], [&set("128-130")]);
        assert!(free.contains(64) && free.contains(95), "group 2's block");
        assert!(
            !free.contains(128) && !free.contains(159),
            "touched by a claim"
        );
        assert!(!free.contains(0) && !free.contains(96));
        assert_eq!(free.len() % SHARDS_PER_GROUP, 0);
        assert_eq!(free_blocks(0..GROUPS as i32, []), ShardSet::empty());
    }

    /// A configured `snowid.shards`: mostly the default, sometimes a set by hand.
    fn configured() -> impl Strategy<Value = ShardSet> {
        prop_oneof![
            3 => Just(ShardSet::all()),
            2 => prop::collection::vec((0usize..SHARD_COUNT, 0usize..200), 0..4).prop_map(|ranges| {
                let mut set = ShardSet::empty();
                for (start, len) in ranges {
                    (start..(start + len).min(SHARD_COUNT)).for_each(|s| set.insert(s));
                }
                set
            }),
        ]
    }

    proptest! {
        /// Whatever two nodes of different groups claim, and whether or not each answered the
        /// other (one that does not answer is taken at its group's block), the shards they
        /// generate for after checking against each other are disjoint, within what each
        /// claims, unless both claim by hand and neither answered; and the default
        /// configuration loses nothing to another node left at the default.
        #[test]
        fn two_nodes_that_checked_never_share_a_shard(
            group_a in 0i32..300, group_b in 0i32..300,
            configured_a in configured(), configured_b in configured(),
            a_answers in any::<bool>(), b_answers in any::<bool>(),
        ) {
            prop_assume!(group_a != group_b);
            let none = ShardSet::empty();
            let (claim_a, claim_b) = (claim(&configured_a, group_a), claim(&configured_b, group_b));
            let answer_a = a_answers.then(|| Answer::of(&configured_a, group_a, &none));
            let answer_b = b_answers.then(|| Answer::of(&configured_b, group_b, &none));
            let a = check(group_a, &claim_a, &[Peer { group: group_b, answer: answer_b }]);
            let b = check(group_b, &claim_b, &[Peer { group: group_a, answer: answer_a }]);
            // Each node sees the other's true claim unless that one claims by hand and does not
            // answer (taken at its group's block instead). One of them seeing the other's is
            // enough; only two nodes set by hand that cannot reach each other could overlap.
            let a_sees_b = b_answers || !by_hand(&configured_b);
            let b_sees_a = a_answers || !by_hand(&configured_a);
            if a_sees_b || b_sees_a {
                prop_assert!(a.generating.is_disjoint(&b.generating));
            }
            prop_assert!(a.generating.is_subset(&claim_a));
            prop_assert_eq!(a.generating.union(&a.refused()), claim_a.clone());
            if !by_hand(&configured_a) && !by_hand(&configured_b) {
                prop_assert_eq!(a.generating, claim_a);
            }
        }

        /// A cluster left at the default: every node generates for its whole block, and no two
        /// nodes for the same shard.
        #[test]
        fn a_cluster_with_no_configuration_generates_everywhere_without_overlap(
            groups in prop::collection::btree_set(0i32..GROUPS as i32, 1..40),
        ) {
            let groups: Vec<i32> = groups.into_iter().collect();
            let mut seen = ShardSet::empty();
            for &group in &groups {
                let peers: Vec<Peer> = groups.iter().map(|&g| Peer {
                    group: g,
                    answer: Some(Answer::of(&ShardSet::all(), g, &ShardSet::empty())),
                }).collect();
                let verdict = check(group, &claim(&ShardSet::all(), group), &peers);
                prop_assert_eq!(&verdict.generating, &block(group).unwrap());
                prop_assert!(verdict.generating.is_disjoint(&seen));
                seen = seen.union(&verdict.generating);
            }
        }

        /// A node that has just checked against another's claim is not out of date against it.
        #[test]
        fn a_check_against_a_claim_is_up_to_date_with_it(
            mine in configured(), theirs in configured(), group in 0i32..300,
        ) {
            let claim_mine = claim(&mine, 0);
            let peer = Peer { group, answer: Some(Answer::of(&theirs, group, &ShardSet::empty())) };
            prop_assume!(group != 0);
            let verdict = check(0, &claim_mine, std::slice::from_ref(&peer));
            prop_assert!(!out_of_date(&claim_mine, &verdict.refused(), &verdict.shared[0], &peer.claim()));
        }
    }
}
