//! What the check tells every process: the last check's [`Report`] (for the errors,
//! `snowid_citus_nodes()` and the answers to other nodes), and the nodes that asked this one
//! without being in its record of the nodes ([`ToldNodes`]). Both travel as [`Message`]s.

use super::message::Message;
use crate::errors::{CitusNode, MaskKeysDiffer};
use serde::{Deserialize, Serialize};
use snowid_core::citus::Question;
use snowid_core::shard_set::ShardSet;

/// The last check's findings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Which check this is: the count of checks published, with this one.
    pub check: u64,
    /// When it was published, in Unix milliseconds.
    pub at_unix_ms: i64,
    /// The database whose Citus metadata it read.
    pub database: String,
    /// A fingerprint of the `snowid.shards` it used (see [`fingerprint_of`]): the setting and
    /// the result of one check travel together.
    pub fingerprint: u64,
    /// Why the check could not be made, if it could not: this node then generates nothing.
    pub failure: Option<String>,
    /// This node.
    pub node: NodeReport,
    /// The shards it may generate for.
    pub generating: String,
    /// The other nodes: Citus's record of the nodes here, in its order, then the nodes that
    /// asked this one without being in it.
    pub peers: Vec<NodeReport>,
    /// How many other nodes were left out to fit the report's slot (those that share no shard
    /// with this node and answered, first).
    pub left_out: usize,
    /// The highest Citus group known to have been given out (-1 where none is known).
    pub given: i32,
    /// A node whose public IDs' keys for this database differ from this node's, if any: the mask
    /// functions then refuse here.
    pub mask_keys_differ: Option<MaskKeysDiffer>,
}

/// One node, as a check found it: the node as errors name it, and what the check made of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeReport {
    /// Its name, its group here and the one it takes itself to be in, its claim, why it did not
    /// answer, the IDs it issued outside its claim.
    #[serde(flatten)]
    pub about: CitusNode,
    /// The shards of this node's claim that it claims too (for this node: every refused one).
    pub shared: String,
    /// Whether the check asked it (a node of Citus's record here, not this one).
    pub asked: bool,
}

impl std::ops::Deref for NodeReport {
    type Target = CitusNode;

    fn deref(&self) -> &CitusNode {
        &self.about
    }
}

impl NodeReport {
    pub fn describe(&self) -> CitusNode {
        self.about.clone()
    }

    pub fn shared(&self) -> ShardSet {
        shards(&self.shared)
    }

    pub fn claim(&self) -> ShardSet {
        shards(&self.about.claim)
    }
}

fn shards(text: &str) -> ShardSet {
    ShardSet::parse(text).unwrap_or_else(|_| ShardSet::empty())
}

impl Report {
    pub fn claim(&self) -> ShardSet {
        self.node.claim()
    }

    pub fn refused(&self) -> ShardSet {
        self.node.shared()
    }

    /// What this node refuses because of the node named `name`.
    pub fn refused_for(&self, name: &str) -> ShardSet {
        self.peers
            .iter()
            .filter(|p| p.name == name)
            .fold(ShardSet::empty(), |all, p| all.union(&p.shared()))
    }

    /// The first other node that claims `shard` too.
    pub fn sharer_of(&self, shard: usize) -> Option<&NodeReport> {
        self.peers.iter().find(|p| p.shared().contains(shard))
    }

    /// Whether the check asked a node of this name (one of Citus's record here).
    pub fn asked(&self, name: &str) -> bool {
        self.peers.iter().any(|p| p.name == name && p.asked)
    }
}

impl Message for Report {
    /// Leaves out the last node that shares nothing with this one and answered, else the last
    /// node.
    fn shrink(&mut self) -> bool {
        let quiet = self
            .peers
            .iter()
            .rposition(|p| p.shared.is_empty() && p.unanswered.is_none());
        let Some(index) = quiet.or(self.peers.len().checked_sub(1)) else {
            return false;
        };
        self.peers.remove(index);
        self.left_out += 1;
        true
    }
}

/// A fingerprint of a set of shards, to tell whether `snowid.shards` changed.
pub fn fingerprint_of(set: &ShardSet) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    set.words().hash(&mut hasher);
    hasher.finish()
}

/// How long a node known only by its question counts: a node whose claim overlaps this one's
/// sees the overlap in this node's answer, refuses, and asks again every few seconds (see
/// `super::checker::AGAIN`), so a question not asked again for this long is from a node that
/// stopped, or no longer overlaps (or that now asks under the name Citus's record gives it).
pub const TOLD_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Nodes that asked this one without being in its record of the nodes (a coordinator whose
/// worker `stop_metadata_sync_to_node` reset, say): each one's last question, which this node's
/// checks take as that node's claim for [`TOLD_FOR`] after it asked (a node of Citus's record
/// here is asked like any other instead).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ToldNodes {
    pub nodes: Vec<ToldNode>,
    /// How many were left out to fit the slot, oldest first.
    pub left_out: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ToldNode {
    /// The node's question, as it asked it.
    pub question: String,
    /// When, in Unix milliseconds.
    pub at_unix_ms: i64,
}

impl ToldNodes {
    /// Each node's question, parsed, with when it was asked.
    pub fn questions(&self) -> Vec<(Question, i64)> {
        self.nodes
            .iter()
            .filter_map(|n| Some((Question::parse(&n.question).ok()?, n.at_unix_ms)))
            .collect()
    }

    /// Records a node's question, asked at `at_unix_ms`, in place of its last, and forgets the
    /// questions past [`TOLD_FOR`].
    pub fn record(&mut self, question: &Question, at_unix_ms: i64) {
        let current = |at: i64| at_unix_ms - at < TOLD_FOR.as_millis() as i64;
        self.nodes.retain(|n| {
            current(n.at_unix_ms)
                && Question::parse(&n.question).is_ok_and(|q| q.from != question.from)
        });
        self.nodes.push(ToldNode {
            question: question.to_text(),
            at_unix_ms,
        });
    }
}

impl Message for ToldNodes {
    fn shrink(&mut self) -> bool {
        if self.nodes.is_empty() {
            return false;
        }
        self.nodes.remove(0);
        self.left_out += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, shared: &str, unanswered: Option<&str>) -> NodeReport {
        NodeReport {
            about: CitusNode {
                name: name.into(),
                group: Some(1),
                own_group: Some(1),
                by_hand: Some(false),
                claim: "32-63".into(),
                unanswered: unanswered.map(Into::into),
                issued: None,
            },
            shared: shared.into(),
            asked: true,
        }
    }

    #[test]
    fn a_report_leaves_out_the_nodes_that_matter_least_first_and_counts_them() {
        let mut report = Report {
            check: 1,
            at_unix_ms: 0,
            database: "postgres".into(),
            fingerprint: 0,
            failure: None,
            node: node("me", "", None),
            generating: String::new(),
            peers: vec![
                node("sharing", "40", None),
                node("quiet 1", "", None),
                node("silent", "", Some("unreachable")),
                node("quiet 2", "", None),
            ],
            left_out: 0,
            given: 1,
            mask_keys_differ: None,
        };
        let names = |r: &Report| r.peers.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert!(report.shrink() && report.shrink());
        assert_eq!(names(&report), ["sharing", "silent"]);
        assert!(report.shrink() && report.shrink());
        assert_eq!(report.left_out, 4);
        assert!(!report.shrink(), "nothing more to leave out");
    }
}
