//! A check: this node's claim against every other node's, published for the hot path. Made by
//! the checker alone (see [`super::checker`]), in its database.
//!
//! It reads Citus's metadata (this node's group, every primary node and its group, the last group
//! given out), works out its own claim (`snowid.shards`, or its group's block at the default), and
//! asks every primary node of another group (itself, its standbys and the primary it replaced are
//! one node, the one of its own group) what it claims, telling it this node's claim and the group
//! it has that node in: a node whose own last check that makes out of date checks again, so two
//! nodes whose claims overlap both refuse the shards they share, whichever changed last. The
//! nodes that asked this one without being in its record of the nodes count too, at the claim
//! they told. What each node's answer means, and what a node that did not answer is taken to
//! claim, is `snowid_core::citus`'s.
//!
//! Asking is skipped when nothing it could change has: Citus's record of the nodes and this
//! node's claim are as the last check that asked found them, and no node has called for asking
//! again since (a refused shard, another node's new claim, the checker's timer while some node
//! did not answer or some shard is refused).

use super::metadata::{self, Metadata, Node};
use super::report::{self, fingerprint_of, NodeReport, Report};
use super::segment::Segment;
use crate::errors::{CitusNode, MaskKeysDiffer};
use crate::server::mask_key;
use pgrx::prelude::*;
use snowid_core::citus::{self, Answer, Heard, Issued, Peer, Question};
use snowid_core::host::Clock;
use snowid_core::shard_set::ShardSet;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

/// What a check reads of this server's own IDs: given by the layer above, which reads the
/// generator's shards.
#[derive(Clone, Copy)]
pub struct OwnIds {
    /// The IDs this server issued since it started for shards outside a claim (see
    /// `snowid_core::citus::Issued`).
    pub outside: fn(&ShardSet) -> Option<Issued>,
    /// Whether this server's next ID for a shard is above an ID.
    pub above: fn(usize, i64) -> bool,
}

/// What the checker keeps from one check to the next, in its own memory.
#[derive(Default)]
pub struct Memory {
    /// What the last check that asked saw.
    asked: Option<Asked>,
    /// What each node of Citus's record said to the last check, by name.
    heard: HashMap<String, Heard>,
    /// Each node's last answer, by name: what a node that cannot answer now is taken to claim
    /// besides its group's block.
    answers: HashMap<String, Answer>,
    /// What each node has heard this node claim, by name: the claim of the last question it
    /// answered.
    heard_ours: HashMap<String, ShardSet>,
    /// The warnings logged, so that each is logged once.
    warned: BTreeSet<String>,
    /// The shards the last check refused, to log a change.
    refused: Option<ShardSet>,
    /// The nodes an earlier checker of this server knew through another database (before
    /// `snowid.citus_database` changed), by name, with what they claimed then: kept until the
    /// server restarts, or until Citus's record here has them.
    remembered: Vec<(String, ShardSet)>,
}

impl Memory {
    /// A checker's memory as it starts: if the last check was made in another database, its
    /// nodes are remembered at their claims.
    pub fn starting_after(last: Option<&Report>, database: &str) -> Memory {
        let remembered = last
            .filter(|report| report.database != database || report.failure.is_some())
            .map(|report| {
                report
                    .peers
                    .iter()
                    .map(|p| (p.name.clone(), p.claim()))
                    .filter(|(_, claim)| !claim.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Memory {
            remembered,
            ..Memory::default()
        }
    }
}

/// What a check that asks depends on.
#[derive(PartialEq)]
struct Asked {
    metadata: u64,
    claim: ShardSet,
    asks: u64,
}

/// Whether the check should be made again soon, asking every node: some node asked did not
/// answer, or some shard is refused (the other node may give it back without a word).
pub struct Outcome {
    pub again: bool,
}

/// Makes a check and publishes it. Asks the other nodes if `ask` or if anything it depends on
/// changed since the last check that asked.
pub fn run(
    memory: &mut Memory,
    segment: &Segment,
    configured: &ShardSet,
    ask: bool,
    own: OwnIds,
) -> Outcome {
    let (wanted, asks) = segment.begin_check();
    let database = database_name();
    let fingerprint = fingerprint_of(configured);
    let Some(metadata) = metadata::read() else {
        let why = format!("database \"{database}\" (snowid.citus_database) has no citus extension");
        publish_failure(memory, segment, wanted, &database, fingerprint, why);
        return Outcome { again: false };
    };
    segment.watch(&metadata.watched);
    let claim = citus::claim(configured, metadata.group);
    let me = this_node_name(&metadata);
    let asked = Asked {
        metadata: metadata_fingerprint(&metadata),
        claim: claim.clone(),
        asks,
    };
    let asking = ask || memory.asked.as_ref() != Some(&asked);
    // What this node may generate for until this check is published: its claim, and what it
    // generates for now.
    let claims = claim.union(&segment.generating());
    let mut peers = hear_the_recorded(memory, &metadata, &me, &claims, asking);
    if asking {
        memory.asked = Some(asked);
    }
    let asked_count = peers.len();
    add_the_unasked(&mut peers, memory, segment, &metadata, &me);
    let block = citus::block(metadata.group).unwrap_or_else(ShardSet::empty);
    let verdict = citus::check(&claim, &block, &peers, own.above);
    let mine = (own.outside)(&claim);
    let mask_keys_differ = differing_mask_keys(memory, &me, &peers);
    warn_of_issued_ids(memory, &me, &claim, mine.as_ref(), &peers);
    log_change(memory, &me, &verdict.refused());
    // Asked again soon while a node asked could not answer, some shard is refused, or a node is
    // known by its question only (which counts for a while).
    let again = !verdict.refused().is_empty()
        || mask_keys_differ.is_some()
        || peers[..asked_count].iter().any(Peer::unsettled)
        || peers[asked_count..]
            .iter()
            .any(|p| matches!(p.heard, Heard::Told(_)));
    let mut report = Report {
        check: 0,
        at_unix_ms: snowid_core::clock::SystemClock.wall_ms(),
        database,
        fingerprint,
        failure: None,
        node: NodeReport {
            about: CitusNode {
                name: me,
                group: Some(metadata.group),
                own_group: Some(metadata.group),
                by_hand: Some(citus::by_hand(configured)),
                claim: claim.to_string(),
                unanswered: None,
                issued: mine.map(|i| (i.shards.to_string(), i.last_id)),
            },
            shared: verdict.refused().to_string(),
            asked: false,
        },
        generating: verdict.generating.to_string(),
        peers: peers
            .iter()
            .zip(&verdict.shared)
            .enumerate()
            .map(|(i, (peer, shared))| node_report(peer, shared, i < asked_count))
            .collect(),
        left_out: 0,
        given: groups_given(&metadata, &peers),
        mask_keys_differ,
    };
    debug1!(
        "snowid checked this Citus node's shards ({}): it claims {}, {} the other nodes, and \
         generates for {}",
        report.node.name,
        report.node.claim,
        if asking {
            "asking"
        } else {
            "as they last answered"
        },
        report.generating
    );
    segment.publish(wanted, &verdict.generating, &mut report);
    Outcome { again }
}

/// The primary nodes of other groups in Citus's record, each as it answered `me`'s question (if
/// `asking`: this node claims `claims`), or as it answered the last check that asked; with its
/// last answer where it has none now.
fn hear_the_recorded(
    memory: &mut Memory,
    metadata: &Metadata,
    me: &str,
    claims: &ShardSet,
    asking: bool,
) -> Vec<Peer> {
    let others: Vec<&Node> = metadata
        .nodes
        .iter()
        .filter(|n| n.group != metadata.group)
        .collect();
    if asking {
        let mine_keys = mask_key::fingerprints_if_any();
        let questions: Vec<Question> = others
            .iter()
            .map(|node| Question {
                from: me.to_string(),
                group: metadata.group,
                claim: claims.clone(),
                recorded: node.group,
                mask_keys: mine_keys.clone(),
            })
            .collect();
        let nodes: Vec<Node> = others.iter().map(|n| (*n).clone()).collect();
        let heard = metadata::ask(&nodes, &questions);
        for (node, heard) in others.iter().zip(&heard) {
            // A node that answered, or that runs a snowid that asks this one itself, has heard
            // what this node claims now (and no longer what it claimed before, which it may have
            // taken since).
            if matches!(heard, Heard::Answered(_) | Heard::Older) {
                memory.heard_ours.insert(node.name(), claims.clone());
            }
        }
        memory.heard = others.iter().map(|n| n.name()).zip(heard).collect();
    }
    others
        .into_iter()
        .map(|node| {
            let name = node.name();
            let heard = memory
                .heard
                .get(&name)
                .cloned()
                .unwrap_or_else(|| Heard::Unreachable("not asked yet".into()));
            if let Heard::Answered(answer) = &heard {
                memory.answers.insert(name.clone(), (**answer).clone());
            }
            let last = match heard {
                Heard::Answered(_) => None,
                _ => memory.answers.get(&name).cloned(),
            };
            let heard_ours = Some(
                memory
                    .heard_ours
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(ShardSet::empty),
            );
            Peer {
                name,
                recorded: Some(node.group),
                heard,
                last,
                heard_ours,
            }
        })
        .collect()
}

/// Adds the nodes that count without being asked: the coordinator where Citus here does not
/// record it (at group 0's shards, or at what it told if it asked), the nodes that asked this one
/// without being in Citus's record here (for [`report::TOLD_FOR`] after they asked), and those
/// remembered from another database; and to a node of Citus's record that could not answer, what
/// it told in a question since (a node whose question this node answered counts its claim as
/// heard here, so it is taken at that claim even when it cannot answer this node's questions).
fn add_the_unasked(
    peers: &mut Vec<Peer>,
    memory: &Memory,
    segment: &Segment,
    metadata: &Metadata,
    me: &str,
) {
    if metadata.group != 0 && !metadata.nodes.iter().any(|n| n.group == 0) {
        peers.push(Peer {
            name: "the coordinator".into(),
            recorded: Some(0),
            heard: Heard::Unreachable(
                "Citus does not record the coordinator here, so it is not asked".into(),
            ),
            last: None,
            heard_ours: None,
        });
    }
    let recorded: BTreeSet<String> = metadata.nodes.iter().map(Node::name).collect();
    let now = snowid_core::clock::SystemClock.wall_ms();
    for (question, at) in segment.told_nodes().questions() {
        let current = now - at < report::TOLD_FOR.as_millis() as i64;
        if !current || question.from == me {
            continue;
        }
        if recorded.contains(&question.from) {
            // A node of Citus's record that could not answer this check: what it told counts
            // with what it last answered.
            if let Some(peer) = peers.iter_mut().find(|p| p.name == question.from) {
                if !matches!(peer.heard, Heard::Answered(_)) {
                    peer.last = Some(told_with(peer.last.take(), &question));
                }
            }
            continue;
        }
        peers.retain(|p| p.name != question.from);
        peers.push(Peer {
            name: question.from.clone(),
            recorded: None,
            heard: Heard::Told(question),
            last: None,
            heard_ours: None,
        });
    }
    for (name, claim) in &memory.remembered {
        if !recorded.contains(name) && !peers.iter().any(|p| &p.name == name) {
            peers.push(Peer {
                name: name.clone(),
                recorded: None,
                heard: Heard::Remembered(claim.clone()),
                last: None,
                heard_ours: None,
            });
        }
    }
}

/// A node's last answer, with the claim it told since in a question.
fn told_with(last: Option<Answer>, question: &Question) -> Answer {
    match last {
        Some(answer) => Answer {
            claims: answer.claims.union(&question.claim),
            ..answer
        },
        None => Answer {
            group: question.group,
            by_hand: true,
            claims: question.claim.clone(),
            given: -1,
            issued: None,
            mask_keys: None,
        },
    }
}

/// The last group Citus gave out from its sequence, as the coordinator knows it (this node, or
/// the coordinator's answer); where neither can say, the highest group any node is in, so that
/// no group below it counts as never given.
fn groups_given(metadata: &Metadata, peers: &[Peer]) -> i32 {
    let coordinators = peers.iter().filter_map(|p| match &p.heard {
        Heard::Answered(answer) if answer.group == 0 => Some(answer.given),
        _ => None,
    });
    match metadata.group {
        0 => Some(metadata.given),
        _ => coordinators.max(),
    }
    .unwrap_or_else(|| {
        // With the groups the nodes that asked this one have it in.
        let told = peers.iter().filter_map(|p| match &p.heard {
            Heard::Told(question) => Some(question.recorded),
            _ => None,
        });
        peers
            .iter()
            .filter_map(Peer::group)
            .chain(told)
            .chain([metadata.group])
            .max()
            .unwrap_or(-1)
    })
}

/// Publishes a check that could not be made: this node generates nothing, and every refusal
/// says why. The report keeps the nodes remembered from another database, so that a checker
/// that starts again in this one remembers them too.
pub fn publish_failure(
    memory: &Memory,
    segment: &Segment,
    wanted: u64,
    database: &str,
    fingerprint: u64,
    why: String,
) {
    let mut report = Report {
        check: 0,
        at_unix_ms: snowid_core::clock::SystemClock.wall_ms(),
        database: database.to_string(),
        fingerprint,
        failure: Some(why),
        node: NodeReport {
            about: CitusNode {
                name: "this node".into(),
                group: None,
                own_group: None,
                by_hand: None,
                claim: String::new(),
                unanswered: None,
                issued: None,
            },
            shared: String::new(),
            asked: false,
        },
        generating: String::new(),
        peers: memory
            .remembered
            .iter()
            .map(|(name, claim)| {
                let peer = Peer {
                    name: name.clone(),
                    recorded: None,
                    heard: Heard::Remembered(claim.clone()),
                    last: None,
                    heard_ours: None,
                };
                node_report(&peer, &ShardSet::empty(), false)
            })
            .collect(),
        left_out: 0,
        given: -1,
        mask_keys_differ: None,
    };
    segment.publish(wanted, &ShardSet::empty(), &mut report);
}

/// The first node that answered with public IDs' keys for this database other than this node's
/// (see `snowid_core::citus::mask_keys_differ`); a warning is logged once for each such pair of
/// fingerprints.
fn differing_mask_keys(memory: &mut Memory, me: &str, peers: &[Peer]) -> Option<MaskKeysDiffer> {
    let mine = mask_key::fingerprints_if_any();
    let answered = peers.iter().filter_map(|p| match &p.heard {
        Heard::Answered(answer) => Some((p.name.as_str(), answer.mask_keys.as_deref())),
        _ => None,
    });
    let (node, theirs) = citus::mask_keys_differ(mine.as_deref(), answered)?;
    let mine_text = mine.as_deref().unwrap_or_default();
    if memory
        .warned
        .insert(format!("mask keys {node} {theirs} {mine_text}"))
    {
        warning!(
            "snowid's public IDs' keys differ between Citus nodes {me} and {node}: the mask \
             functions refuse on this node until they agree (here {mine_text}, there {theirs})"
        );
    }
    Some(MaskKeysDiffer {
        node,
        theirs,
        mine: mine.unwrap_or_default(),
    })
}

fn node_report(peer: &Peer, shared: &ShardSet, asked: bool) -> NodeReport {
    let (by_hand, unanswered, issued) = match &peer.heard {
        Heard::Answered(answer) => (
            Some(answer.by_hand),
            None,
            answer
                .issued
                .as_ref()
                .map(|i| (i.shards.to_string(), i.last_id)),
        ),
        Heard::Unreachable(why) => (
            None,
            Some(format!(
                "unreachable ({why}): taken to claim its group's shards here and any it last \
                 answered"
            )),
            None,
        ),
        Heard::Older => (
            None,
            Some(
                "it runs a snowid older than 0.8.0, or none, and cannot answer: taken to claim \
                 its group's shards here and any it last answered"
                    .into(),
            ),
            None,
        ),
        Heard::Failed(why) => (
            None,
            Some(format!("it answered with an error: {why}")),
            None,
        ),
        Heard::Remembered(_) => (
            None,
            Some(
                "known through the database snowid.citus_database named before, where it \
                 claimed these shards: it cannot be asked here, and counts until this server \
                 restarts"
                    .into(),
            ),
            None,
        ),
        Heard::Told(question) => (
            None,
            Some(format!(
                "it asked this node, which it has in Citus group {}, and claims what it told",
                question.recorded
            )),
            None,
        ),
    };
    NodeReport {
        about: CitusNode {
            name: peer.name.clone(),
            group: peer.recorded,
            own_group: match &peer.heard {
                Heard::Answered(_) | Heard::Told(_) => peer.group(),
                _ => None,
            },
            by_hand,
            claim: peer.claim().to_string(),
            unanswered,
            issued,
        },
        shared: shared.to_string(),
        asked,
    }
}

/// Logs, once each, the IDs another node issued for shards this node claims (a server that
/// generated on its own before `citus_add_node` joined it), and those this node issued for
/// shards another node claims.
fn warn_of_issued_ids(
    memory: &mut Memory,
    me: &str,
    claim: &ShardSet,
    mine: Option<&Issued>,
    peers: &[Peer],
) {
    for peer in peers {
        let theirs = match &peer.heard {
            Heard::Answered(answer) => answer.issued.as_ref(),
            _ => None,
        };
        if let Some(issued) = theirs.filter(|i| !i.shards.is_disjoint(claim)) {
            let shards = issued.shards.intersection(claim);
            let key = format!("theirs {} {shards} {}", peer.name, issued.last_id);
            if memory.warned.insert(key) {
                warning!(
                    "{} issued IDs for snowid shards {shards}, which this Citus node ({me}) \
                     claims, outside its own claim now (before it joined the cluster, or under \
                     another snowid.shards), up to ID {}: rows it keyed then can carry IDs this \
                     node issued too; keep them out of the cluster's tables or give them new keys. This node refuses those shards while \
                     its next IDs for them could be at or below that one (SELECT \
                     snowid_resume_above({}) lifts that at once)",
                    peer.name,
                    issued.last_id,
                    issued.last_id
                );
            }
        }
        if let Some(issued) = mine {
            let shards = issued.shards.intersection(&peer.claim());
            let key = format!("mine {} {shards} {}", peer.name, issued.last_id);
            if !shards.is_empty() && memory.warned.insert(key) {
                warning!(
                    "this Citus node ({me}) issued IDs for snowid shards {shards} since it \
                     started (up to ID {}), outside its claim now, and {} claims them: rows it \
                     keyed then can carry IDs that node issues too; keep them out of the \
                     cluster's tables or give them new keys",
                    issued.last_id,
                    peer.name
                );
            }
        }
    }
}

/// Logs a change of the shards this node refuses.
fn log_change(memory: &mut Memory, me: &str, refused: &ShardSet) {
    if memory.refused.as_ref() == Some(refused) {
        return;
    }
    if !refused.is_empty() {
        warning!(
            "this Citus node ({me}) refuses snowid shards {refused}: another node claims them too \
             (SELECT * FROM snowid_citus_nodes() says which)"
        );
    } else if memory.refused.is_some() {
        log!("this Citus node ({me}) refuses no snowid shard of its claim any more");
    }
    memory.refused = Some(refused.clone());
}

fn metadata_fingerprint(metadata: &Metadata) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    metadata.group.hash(&mut hasher);
    metadata.record.hash(&mut hasher);
    hasher.finish()
}

/// This node's name: `host:port` where Citus records it; else "the coordinator" for a node of
/// group 0 that records other nodes, "this node" for one that records none (a node before it
/// joins, or after `stop_metadata_sync_to_node`, which asks no node), and its group otherwise.
fn this_node_name(metadata: &Metadata) -> String {
    let recorded = metadata.nodes.iter().find(|n| n.group == metadata.group);
    match recorded {
        Some(node) => node.name(),
        None if metadata.nodes.is_empty() => "this node".into(),
        None if metadata.group == 0 => "the coordinator".into(),
        None => format!("the node of Citus group {}", metadata.group),
    }
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
