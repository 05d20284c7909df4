//! A check: this node's claim against every other node's, published for the hot path; and this
//! node's answer when another node checks.
//!
//! One process at a time checks (see [`super::segment`]). It reads Citus's metadata in its
//! database (this node's group, every primary node and its group), works out its own claim
//! (`snowid.shards`, or its group's block at the default), and asks every primary node of another
//! group for its claim over Citus's connections, telling it this node's claim at the same time:
//! a node whose own last check that claim makes out of date checks again (so two nodes whose
//! claims overlap both refuse the shards they share, whichever changed last). A node that does
//! not answer is taken to claim its group's block; the coordinator counts as group 0 even where
//! Citus does not record it. Nodes of this node's own group are its standbys or the primary it
//! replaced, and are not asked.
//!
//! Asking is skipped when nothing it could change has: Citus's record of the nodes and this
//! node's claim are as the last check found them, every node answered then, and no node has
//! told of a new claim since. (A change of Citus's metadata is seen by every backend of the
//! database, each of which calls for a check; most of them find nothing new.)

use super::metadata::{self, Metadata, Node};
use super::segment::Segment;
use crate::errors::{self, CitusNode};
use serde::{Deserialize, Serialize};
use snowid_core::citus::{self, Answer, Peer};
use snowid_core::shard_set::ShardSet;
use std::hash::{Hash, Hasher};

/// The last check's findings, kept in shared memory for errors, `snowid_citus_nodes()` and the
/// answers to other nodes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub database: String,
    /// This node.
    pub node: NodeReport,
    /// The shards it may generate for.
    pub generating: String,
    /// The other nodes, in Citus's order.
    pub peers: Vec<NodeReport>,
    /// A fingerprint of what the check read (Citus's record of the nodes and this node's group).
    pub metadata: u64,
    /// The count of other nodes' new claims this node knew of when it last asked them (see
    /// [`Segment::begin_check`]).
    pub claims_moved: u64,
}

/// One node, as a check found it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeReport {
    /// `host:port`, or a description where Citus does not record the node.
    pub name: String,
    pub group: i32,
    /// Whether its claim is set by hand (`snowid.shards`); `None` where it did not answer.
    pub by_hand: Option<bool>,
    pub claim: String,
    /// Its answer, or why there is none.
    pub answer: Result<String, String>,
    /// Whether the check asked it (not this node, nor a coordinator Citus does not record).
    pub asked: bool,
    /// The shards of this node's claim that it claims too (for this node: every refused one).
    pub shared: String,
}

impl NodeReport {
    pub fn describe(&self) -> CitusNode {
        CitusNode {
            name: self.name.clone(),
            group: self.group,
            by_hand: self.by_hand,
            claim: self.claim.clone(),
        }
    }
}

impl Report {
    pub fn decode(bytes: &[u8]) -> Option<Report> {
        serde_json::from_slice(bytes).ok()
    }

    fn shards(text: &str) -> ShardSet {
        ShardSet::parse(text).unwrap_or_else(|_| ShardSet::empty())
    }

    pub fn claim(&self) -> ShardSet {
        Report::shards(&self.node.claim)
    }

    pub fn refused(&self) -> ShardSet {
        Report::shards(&self.node.shared)
    }

    /// What this node refuses because of the nodes of `group`.
    pub fn refused_for(&self, group: i32) -> ShardSet {
        self.peers
            .iter()
            .filter(|p| p.group == group)
            .fold(ShardSet::empty(), |all, p| {
                all.union(&Report::shards(&p.shared))
            })
    }

    /// The first other node that claims `shard` too.
    pub fn sharer_of(&self, shard: usize) -> Option<&NodeReport> {
        self.peers
            .iter()
            .find(|p| Report::shards(&p.shared).contains(shard))
    }
}

/// A fingerprint of a set of shards, to tell whether `snowid.shards` changed.
pub fn fingerprint_of(set: &ShardSet) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    set.words().hash(&mut hasher);
    hasher.finish()
}

fn metadata_fingerprint(metadata: &Metadata) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    metadata.group.hash(&mut hasher);
    metadata.nodes.hash(&mut hasher);
    hasher.finish()
}

/// Another node as a check found it: its name, its group and answer as [`citus::check`] takes
/// them, its answer as text or why there is none, and whether it was asked.
struct Finding {
    name: String,
    peer: Peer,
    answer: Result<String, String>,
    asked: bool,
}

impl Finding {
    fn of(name: String, group: i32, answer: Result<String, String>, asked: bool) -> Finding {
        let parsed = answer.as_ref().ok().and_then(|a| Answer::parse(a).ok());
        Finding {
            name,
            peer: Peer {
                group,
                answer: parsed,
            },
            answer,
            asked,
        }
    }
}

/// Runs a check and publishes it. Call only as the checker (see [`Segment::become_checker`]).
/// Unless `may_ask`, it refuses when it would have to ask the other nodes (in a parallel worker,
/// which cannot), and publishes only where their last answers still stand.
pub fn run(segment: &Segment, configured: &ShardSet, may_ask: bool) {
    let (wanted, claims_moved) = segment.begin_check();
    let Some(metadata) = metadata::read() else {
        errors::citus_not_in_this_database(&database_name())
    };
    segment.watch(&metadata.watched, fingerprint_of(configured));
    let claim = citus::claim(configured, metadata.group);
    let fingerprint = metadata_fingerprint(&metadata);
    let last = segment.report().as_deref().and_then(Report::decode);
    let reusable = last.filter(|last| {
        last.claims_moved == claims_moved
            && last.metadata == fingerprint
            && last.claim() == claim
            && last.peers.iter().all(|p| p.answer.is_ok() || !p.asked)
    });
    let asked = reusable.is_none();
    let findings = match reusable {
        Some(last) => last
            .peers
            .into_iter()
            .map(|p| Finding::of(p.name, p.group, p.answer, p.asked))
            .collect(),
        None if !may_ask => errors::citus_check_in_parallel(),
        None => ask_the_others(&metadata, &claim),
    };
    let peers: Vec<Peer> = findings.iter().map(|f| f.peer.clone()).collect();
    let verdict = citus::check(metadata.group, &claim, &peers);
    let report = Report {
        database: database_name(),
        node: NodeReport {
            name: this_node_name(&metadata),
            group: metadata.group,
            by_hand: Some(citus::by_hand(configured)),
            claim: claim.to_string(),
            answer: Ok(Answer::of(configured, metadata.group, &verdict.generating).to_string()),
            asked: false,
            shared: verdict.refused().to_string(),
        },
        generating: verdict.generating.to_string(),
        peers: findings
            .into_iter()
            .zip(&verdict.shared)
            .map(|(f, shared)| NodeReport {
                by_hand: f.peer.answer.as_ref().map(|a| a.by_hand),
                claim: f.peer.claim().to_string(),
                name: f.name,
                group: f.peer.group,
                answer: f.answer,
                asked: f.asked,
                shared: shared.to_string(),
            })
            .collect(),
        metadata: fingerprint,
        claims_moved,
    };
    pgrx::debug1!(
        "snowid checked this Citus node's shards ({}): it claims {}, {} the other nodes, and \
         generates for {}",
        report.node.name,
        report.node.claim,
        if asked {
            "asking"
        } else {
            "as they last answered"
        },
        report.generating
    );
    let bytes = serde_json::to_vec(&report).unwrap_or_default();
    segment.publish(wanted, &verdict.generating, &bytes);
}

/// This node's name: `host:port` where Citus records it.
fn this_node_name(metadata: &Metadata) -> String {
    metadata
        .nodes
        .iter()
        .find(|n| n.group == metadata.group)
        .map(Node::name)
        .unwrap_or_else(|| match metadata.group {
            0 => "the coordinator".into(),
            _ => "this node".into(),
        })
}

/// Asks every primary node of another group for its claim, telling it this node's; and the
/// coordinator, where Citus does not record it, taken at group 0's shards without asking.
fn ask_the_others(metadata: &Metadata, claim: &ShardSet) -> Vec<Finding> {
    let others: Vec<Node> = metadata
        .nodes
        .iter()
        .filter(|n| n.group != metadata.group)
        .cloned()
        .collect();
    let command = format!(
        "SELECT {}.snowid_citus_claim({}, '{}')",
        metadata.snowid_schema, metadata.group, claim
    );
    let commands = vec![command; others.len()];
    let mut findings: Vec<Finding> = others
        .iter()
        .zip(metadata::ask(&others, &commands))
        .map(|(node, answer)| {
            let answer = answer.and_then(|text| match Answer::parse(&text) {
                Ok(_) => Ok(text),
                Err(_) => Err(format!("answered \"{text}\", not a claim")),
            });
            Finding::of(node.name(), node.group, answer, true)
        })
        .collect();
    if metadata.group != 0 && !metadata.nodes.iter().any(|n| n.group == 0) {
        findings.push(Finding::of(
            "the coordinator".into(),
            0,
            Err("Citus does not record the coordinator here, so it is not asked".into()),
            false,
        ));
    }
    findings
}

/// This node's answer to another node's check: what it claims, computed afresh (the asking
/// connection is a new backend, which has the configuration as last reloaded) with what it
/// generates for now. If the asker's claim makes this node's last check out of date, this node
/// checks again before it generates next.
pub fn answer(
    segment: Option<&Segment>,
    configured: &ShardSet,
    asker_group: i32,
    asker_claim: &ShardSet,
) -> String {
    let Some(group) = metadata::local_group() else {
        errors::citus_not_in_this_database(&database_name())
    };
    let generating = segment
        .map(Segment::generating)
        .unwrap_or_else(ShardSet::empty);
    if let Some(segment) = segment {
        let last = segment.report().as_deref().and_then(Report::decode);
        // Only the node whose claim changed makes others check again: their asks carry claims
        // its last check already saw, so they make no node check again in turn.
        if let Some(last) = last.filter(|_| asker_group != group) {
            if citus::out_of_date(
                &last.claim(),
                &last.refused(),
                &last.refused_for(asker_group),
                asker_claim,
            ) {
                segment.want_check(true);
            }
        }
    }
    Answer::of(configured, group, &generating).to_string()
}

/// The name of this backend's database.
pub fn database_name() -> String {
    // SAFETY: get_database_name returns a palloc'd copy of the name, or null.
    unsafe {
        let name = pgrx::pg_sys::get_database_name(pgrx::pg_sys::MyDatabaseId);
        match name.is_null() {
            true => String::new(),
            false => std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned(),
        }
    }
}
