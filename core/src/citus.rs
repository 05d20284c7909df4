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
//! (its default), and the set `snowid.shards` names otherwise. A node checks its claim against
//! every other node's: it asks each one a [`Question`] (who it is, its group and its claim, and
//! the group it has the other node in) and gets an [`Answer`] (the group that node takes itself to
//! be in, which may not be the one Citus's record here gives it, and every shard it claims or
//! generates for). [`check`] then returns the shards the node may generate for: its claim less
//! every shard any other node may generate for ([`Peer::claim`]). What a node could not learn it
//! takes at its widest: one it cannot reach (or that runs an older snowid) at its group's block
//! and whatever it last answered; one that answered with an error at every shard, since nothing
//! it said can be taken as agreement; one that asked this node without being in its record of
//! the nodes (such as a coordinator after `stop_metadata_sync_to_node`) at the claim it told; and
//! one that an earlier check read in another database (before `snowid.citus_database` changed)
//! at the claim it had then.
//! Two nodes whose claims overlap each refuse the shards they share, whichever checks first, so
//! the shards they generate for are disjoint whatever they claim (see the property tests); two
//! nodes that both take themselves to be in one group overlap on its block like any other two.
//!
//! Questions and answers are lists of `key=value` items ([`Fields`]). A reader ignores keys it
//! does not know, so a later version can add a fact to compare between nodes (such as a key's
//! fingerprint) as one more item: an [`Answer`] field, its line in [`Answer::to_text`] and
//! [`Answer::parse`], and its comparison in [`check`], where a mismatch refuses like an overlap.

use crate::layout::SHARD_COUNT;
use crate::shard_set::ShardSet;
use std::collections::BTreeMap;

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

/// A group's block, or no shards past [`GROUPS`].
fn block_or_none(group: i32) -> ShardSet {
    block(group).unwrap_or_else(ShardSet::empty)
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
        block_or_none(group)
    }
}

/// A question's or an answer's items, `key=value;key=value`. Values are escaped (`%` and two hex
/// digits for anything but letters, digits and `.:_,-@[]`), so the text is plain ASCII with no
/// quote, backslash, `;` or `=` inside a value, and can travel inside an SQL string literal
/// whatever the server's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields(BTreeMap<String, String>);

impl Fields {
    pub fn with(mut self, key: &str, value: impl ToString) -> Fields {
        self.0.insert(key.to_string(), value.to_string());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key).ok_or_else(|| format!("it has no \"{key}\""))
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> Result<T, String> {
        self.require(key)?
            .parse()
            .map_err(|_| format!("its \"{key}\" is not a number"))
    }

    fn shards(&self, key: &str) -> Result<ShardSet, String> {
        ShardSet::parse(self.require(key)?).map_err(|e| format!("its \"{key}\": {e}"))
    }

    pub fn parse(text: &str) -> Result<Fields, String> {
        let mut fields = BTreeMap::new();
        for item in text.split(';').filter(|item| !item.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("\"{item}\" is not a key=value item"))?;
            fields.insert(key.to_string(), unescape(value)?);
        }
        Ok(Fields(fields))
    }
}

impl std::fmt::Display for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let items: Vec<String> = self
            .0
            .iter()
            .map(|(key, value)| format!("{key}={}", escape(value)))
            .collect();
        f.write_str(&items.join(";"))
    }
}

fn escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z'
            | b'A'..=b'Z'
            | b'0'..=b'9'
            | b'.'
            | b':'
            | b'_'
            | b','
            | b'-'
            | b'@'
            | b'['
            | b']' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn unescape(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("\"{value}\" has a bad escape"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("\"{value}\" is not UTF-8"))
}

/// What a node that checks asks another: who it is (its `host:port` as Citus records it, or how
/// it describes itself where Citus does not), the group it is in, what it claims, and the group
/// its record of the nodes has the asked node in; and the fingerprints of its public IDs' keys
/// in the database it asks from (`None` where it has none), so that the asked node learns of a
/// difference as soon as the asker does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub from: String,
    pub group: i32,
    pub claim: ShardSet,
    pub recorded: i32,
    pub mask_keys: Option<String>,
}

/// The version of the questions and answers: 2 since snowid 0.8.0 (0.7.0 asked through an SQL
/// function and answered in a shorter form).
pub const PROTOCOL: i32 = 2;

impl Question {
    pub fn to_text(&self) -> String {
        let fields = Fields::default()
            .with("v", PROTOCOL)
            .with("from", &self.from)
            .with("group", self.group)
            .with("claim", &self.claim)
            .with("you", self.recorded);
        match &self.mask_keys {
            Some(keys) => fields.with("mask_keys", keys).to_string(),
            None => fields.to_string(),
        }
    }

    pub fn parse(text: &str) -> Result<Question, String> {
        let fields = Fields::parse(text)?;
        Ok(Question {
            from: fields.require("from")?.to_string(),
            group: fields.number("group")?,
            claim: fields.shards("claim")?,
            recorded: fields.number("you")?,
            mask_keys: fields.get("mask_keys").map(str::to_string),
        })
    }
}

/// IDs a node issued since it started for shards outside its claim now: those of an earlier
/// claim, such as the coordinator's group-0 block of a server that generated on its own before
/// `citus_add_node` joined it to the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub shards: ShardSet,
    /// The highest of those IDs.
    pub last_id: i64,
}

/// A node's answer to another's question: the group it takes itself to be in (from its own
/// `pg_dist_local_group`), whether `snowid.shards` sets its claim by hand, every shard it claims
/// or generates for now (a node whose claim is changing claims the old shards as well as the new
/// until it has checked the new ones), the highest Citus group it knows to have been given out
/// (or -1), the IDs it issued outside its claim, and the fingerprints of its public IDs' keys
/// in the database it answered in (`None` where it has none there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub group: i32,
    pub by_hand: bool,
    pub claims: ShardSet,
    pub given: i32,
    pub issued: Option<Issued>,
    pub mask_keys: Option<String>,
}

impl Answer {
    pub fn to_text(&self) -> String {
        let mut fields = Fields::default()
            .with("v", PROTOCOL)
            .with("group", self.group)
            .with("hand", u8::from(self.by_hand))
            .with("claims", &self.claims)
            .with("given", self.given);
        if let Some(issued) = &self.issued {
            fields = fields
                .with("issued", &issued.shards)
                .with("issued_last", issued.last_id);
        }
        if let Some(keys) = &self.mask_keys {
            fields = fields.with("mask_keys", keys);
        }
        fields.to_string()
    }

    /// The text of a refusal to answer, which [`Answer::parse`] reads as its error.
    pub fn refusal(why: &str) -> String {
        Fields::default()
            .with("v", PROTOCOL)
            .with("error", why)
            .to_string()
    }

    pub fn parse(text: &str) -> Result<Answer, String> {
        let fields = Fields::parse(text).map_err(|e| format!("\"{text}\": {e}"))?;
        if let Some(why) = fields.get("error") {
            return Err(why.to_string());
        }
        let read = || -> Result<Answer, String> {
            let issued = match fields.get("issued") {
                Some(_) => Some(Issued {
                    shards: fields.shards("issued")?,
                    last_id: fields.number("issued_last")?,
                }),
                None => None,
            };
            Ok(Answer {
                group: fields.number("group")?,
                by_hand: fields.require("hand")? == "1",
                claims: fields.shards("claims")?,
                given: fields
                    .get("given")
                    .and_then(|g| g.parse().ok())
                    .unwrap_or(-1),
                issued,
                mask_keys: fields.get("mask_keys").map(str::to_string),
            })
        };
        read().map_err(|e| format!("\"{text}\" is not a snowid node's answer: {e}"))
    }
}

/// The first node, in `peers`' order, whose public IDs' keys differ from this node's (`mine`):
/// its name and its keys' fingerprints. Two nodes that both have keys for the database must have
/// the same ones, or one ID gets two public forms, and a form made on one node reads as another ID
/// on the other. A node without keys there makes no form anyone could misread: its mask
/// functions refuse.
pub fn mask_keys_differ<'a>(
    mine: Option<&str>,
    peers: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Option<(String, String)> {
    let mine = mine?;
    peers.into_iter().find_map(|(name, keys)| match keys {
        Some(keys) if keys != mine => Some((name.to_string(), keys.to_string())),
        _ => None,
    })
}

/// What a check learnt of another node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// It answered (boxed: an answer holds two shard sets).
    Answered(Box<Answer>),
    /// It could not be reached (why).
    Unreachable(String),
    /// It runs an older snowid, or none, so it cannot answer.
    Older,
    /// It answered with an error (which).
    Failed(String),
    /// It is not in Citus's record of the nodes here, and asked this node, telling it this.
    Told(Question),
    /// It was a node of the cluster an earlier check of this node read, in another database,
    /// where it claimed these shards; it cannot be asked here.
    Remembered(ShardSet),
}

/// Another node, as a check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// `host:port`, or how it describes itself.
    pub name: String,
    /// Its group in Citus's record of the nodes here (`None` for a node not in it).
    pub recorded: Option<i32>,
    pub heard: Heard,
    /// Its last answer, where this one is missing.
    pub last: Option<Answer>,
    /// For a node this node asks, the shards of this node's claim it has heard (the claims of the
    /// questions it answered); `None` for a node this node cannot ask, which does not constrain it.
    pub heard_ours: Option<ShardSet>,
}

impl Peer {
    /// Every shard the node may generate for, as far as this node can tell: what it answered,
    /// with its group's block here too unless its claim is set by hand (it takes that block once
    /// it hears its group); what it told, for a node that asked; its group's block and its last
    /// answer for one that cannot answer now; every shard for one that answered with an error.
    pub fn claim(&self) -> ShardSet {
        let recorded = self
            .recorded
            .map(block_or_none)
            .unwrap_or_else(ShardSet::empty);
        match &self.heard {
            Heard::Answered(answer) if answer.by_hand => answer.claims.clone(),
            Heard::Answered(answer) => answer.claims.union(&recorded),
            Heard::Unreachable(_) | Heard::Older => match &self.last {
                Some(last) => recorded.union(&last.claims),
                None => recorded,
            },
            Heard::Failed(_) => ShardSet::all(),
            Heard::Told(question) => question.claim.clone(),
            Heard::Remembered(claim) => claim.clone(),
        }
    }

    /// The group the node takes itself to be in where it said so, else its group here.
    pub fn group(&self) -> Option<i32> {
        match &self.heard {
            Heard::Answered(answer) => Some(answer.group),
            Heard::Told(question) => Some(question.group),
            _ => self.recorded,
        }
    }

    /// Whether a later check should ask this node again without waiting for a change: it could
    /// not answer, or answered with an error.
    pub fn unsettled(&self) -> bool {
        matches!(
            self.heard,
            Heard::Unreachable(_) | Heard::Older | Heard::Failed(_)
        )
    }
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The shards the node may generate for.
    pub generating: ShardSet,
    /// For each peer, in order, the shards of the node's claim that the peer may generate for
    /// too, or issued IDs for that this node could still issue again.
    pub shared: Vec<ShardSet>,
}

impl Verdict {
    /// Every shard of the claim that some other node claims too.
    pub fn refused(&self) -> ShardSet {
        self.shared
            .iter()
            .fold(ShardSet::empty(), |all, shared| all.union(shared))
    }
}

/// The shards a node that claims `claim` may generate for, against the other nodes (itself left
/// out: a node, its standbys and the primary it replaced are one):
/// - every shard another node may generate for too is refused (for that node);
/// - a shard of the claim outside `block` (the node's group's block, which every other node takes
///   it to claim even when it cannot ask it) is refused until every node this node asks has heard
///   it claimed (for each that has not): so two nodes set by hand to the same shards while they
///   cannot reach each other never both generate for them, whichever was set first;
/// - a shard another node issued IDs for outside its own claim stays refused until
///   `above(shard, id)`: this node's next ID for it is above the last of those.
pub fn check(
    claim: &ShardSet,
    block: &ShardSet,
    peers: &[Peer],
    above: impl Fn(usize, i64) -> bool,
) -> Verdict {
    let beyond_block = claim.difference(block);
    let shared: Vec<ShardSet> = peers
        .iter()
        .map(|peer| {
            let mut shared = claim.intersection(&peer.claim());
            if let Some(heard) = &peer.heard_ours {
                shared = shared.union(&beyond_block.difference(heard));
            }
            if let Heard::Answered(answer) = &peer.heard {
                if let Some(issued) = &answer.issued {
                    for s in claim.intersection(&issued.shards).iter() {
                        if !above(s, issued.last_id) {
                            shared.insert(s);
                        }
                    }
                }
            }
            shared
        })
        .collect();
    let mut verdict = Verdict {
        generating: ShardSet::empty(),
        shared,
    };
    verdict.generating = claim.difference(&verdict.refused());
    verdict
}

/// Whether a node's last check is out of date against the claim another node makes now: the
/// node refuses less of that claim than it shares (`refused` is every shard the node refuses,
/// `refused_for_them` those it refuses for that node), or refuses for that node a shard it no
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

/// The blocks of groups Citus has not given out yet (past `given`, the highest group known to
/// have been) and that no node is in or claims: shards that a node past [`GROUPS`], or one set by
/// hand, could take without meeting any node's IDs. Every group up to `given` counts as given,
/// whether its node is in the cluster now or was removed (and may still run): Citus numbers groups
/// from a sequence.
pub fn free_blocks<'a>(
    given: i32,
    groups: impl IntoIterator<Item = i32>,
    claims: impl IntoIterator<Item = &'a ShardSet>,
) -> ShardSet {
    untaken_blocks((given.max(-1) + 1)..GROUPS as i32, &taken(groups, claims))
}

/// The blocks of groups up to `given` that no node of the cluster is in or claims now: those of
/// nodes removed from it, whose IDs are in the cluster's tables (and which may still run, routing
/// inserts with the metadata they had).
pub fn removed_blocks<'a>(
    given: i32,
    groups: impl IntoIterator<Item = i32>,
    claims: impl IntoIterator<Item = &'a ShardSet>,
) -> ShardSet {
    untaken_blocks(0..given.min(GROUPS as i32 - 1) + 1, &taken(groups, claims))
}

/// The blocks of `groups` that share no shard with `taken`.
fn untaken_blocks(groups: std::ops::Range<i32>, taken: &ShardSet) -> ShardSet {
    groups
        .filter_map(block)
        .filter(|b| b.is_disjoint(taken))
        .fold(ShardSet::empty(), |all, b| all.union(&b))
}

fn taken<'a>(
    groups: impl IntoIterator<Item = i32>,
    claims: impl IntoIterator<Item = &'a ShardSet>,
) -> ShardSet {
    let mut taken = ShardSet::empty();
    for group in groups {
        taken = taken.union(&block_or_none(group));
    }
    for claim in claims {
        taken = taken.union(claim);
    }
    taken
}

/// The first whole block of a set of blocks.
pub fn first_block(blocks: &ShardSet) -> ShardSet {
    blocks
        .iter()
        .next()
        .map(|shard| block_or_none((shard / SHARDS_PER_GROUP) as i32))
        .unwrap_or_else(ShardSet::empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(text: &str) -> ShardSet {
        ShardSet::parse(text).unwrap()
    }

    /// A node whose next ID for every shard is above every other node's.
    const ABOVE: fn(usize, i64) -> bool = |_, _| true;

    fn answer(group: i32, configured: &ShardSet, generating: &ShardSet) -> Answer {
        Answer {
            group,
            by_hand: by_hand(configured),
            claims: claim(configured, group).union(generating),
            given: -1,
            issued: None,
            mask_keys: None,
        }
    }

    /// A node recorded in `recorded`, heard as `heard`, with nothing remembered of it.
    fn peer(name: &str, recorded: i32, heard: Heard) -> Peer {
        Peer {
            name: name.into(),
            recorded: Some(recorded),
            heard,
            last: None,
            heard_ours: None,
        }
    }

    fn answered(name: &str, recorded: i32, answer: Answer) -> Peer {
        peer(name, recorded, Heard::Answered(Box::new(answer)))
    }

    /// The coordinator, known by its question to a worker whose record of the nodes is empty.
    fn told_by_the_coordinator() -> Peer {
        Peer {
            name: "127.0.0.1:9700".into(),
            recorded: None,
            heard: Heard::Told(Question {
                from: "127.0.0.1:9700".into(),
                group: 0,
                claim: block(0).unwrap(),
                recorded: 1,
                mask_keys: None,
            }),
            last: None,
            heard_ours: None,
        }
    }

    fn silent(recorded: i32) -> Peer {
        peer(
            "silent",
            recorded,
            Heard::Unreachable("failed to connect".into()),
        )
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
    fn nodes_whose_mask_keys_differ_are_found_and_keyless_ones_are_not() {
        let mine = Some("1*:aaaa");
        // Equal keys, or none on the other node, or none here: nothing to refuse.
        assert_eq!(
            mask_keys_differ(mine, [("w1", Some("1*:aaaa")), ("w2", None)]),
            None
        );
        assert_eq!(mask_keys_differ(None, [("w1", Some("1*:bbbb"))]), None);
        // A different key, a different version masking, or another version beside: the first
        // such node, named with its fingerprints.
        for other in ["1*:bbbb", "1:aaaa 2*:cccc", "1*:aaaa 2:cccc"] {
            assert_eq!(
                mask_keys_differ(mine, [("w1", Some("1*:aaaa")), ("w2", Some(other))]),
                Some(("w2".to_string(), other.to_string())),
                "{other}"
            );
        }
    }

    #[test]
    fn questions_and_answers_round_trip_and_ignore_what_they_do_not_know() {
        let question = Question {
            from: "the coordinator; a=b %".into(),
            group: 0,
            claim: set("0-31,5000"),
            recorded: 1,
            mask_keys: Some("1:9f3a0c5e71b2d846 2*:04e1f8a7c3d5b690".into()),
        };
        let text = question.to_text();
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'\'' && b != b'\\'),
            "{text}"
        );
        assert_eq!(Question::parse(&text).unwrap(), question);
        let answer = Answer {
            group: 3,
            by_hand: false,
            claims: set("96-127"),
            given: 4,
            issued: Some(Issued {
                shards: set("2-5"),
                last_id: 1 << 40,
            }),
            mask_keys: Some("1:9f3a0c5e71b2d846 2*:04e1f8a7c3d5b690".into()),
        };
        assert_eq!(Answer::parse(&answer.to_text()).unwrap(), answer);
        // An answer without keys says none.
        let keyless = Answer {
            mask_keys: None,
            ..answer.clone()
        };
        assert_eq!(Answer::parse(&keyless.to_text()).unwrap(), keyless);
        // A later version's fact is ignored; a missing one is an error.
        let later = format!("{};key_fingerprint=ab12", answer.to_text());
        assert_eq!(Answer::parse(&later).unwrap(), answer);
        for bad in [
            "",
            "group:1",
            "v=2;group=1;hand=0",
            "v=2;group=x;hand=0;claims=",
        ] {
            assert!(Answer::parse(bad).is_err(), "{bad}");
        }
        assert!(Question::parse("v=2;from=x;group=1;claim=9000;you=1").is_err());
        // A refusal reads as its reason.
        let why = "this node takes its Citus group from database \"app\"";
        assert_eq!(Answer::parse(&Answer::refusal(why)), Err(why.to_string()));
    }

    #[test]
    fn what_a_check_takes_each_kind_of_peer_to_claim() {
        // Answered at the default: its shards, and its group's block here too.
        let moving = answered("w1", 1, answer(1, &ShardSet::all(), &set("5")));
        assert_eq!(moving.claim(), set("5,32-63"));
        // A node that takes itself to be in group 0 while Citus here has it in group 1 (after
        // stop_metadata_sync_to_node): both blocks.
        let unsynced = answered("w1", 1, answer(0, &ShardSet::all(), &set("")));
        assert_eq!(unsynced.claim(), set("0-63"));
        assert_eq!(unsynced.group(), Some(0));
        // By hand: what it names.
        let hand = answered("w2", 2, answer(2, &set("100-110"), &set("")));
        assert_eq!(hand.claim(), set("100-110"));
        // Unreachable: its group's block, and what it last answered.
        let mut gone = silent(2);
        assert_eq!(gone.claim(), block(2).unwrap());
        gone.last = Some(answer(2, &set("5000-5009"), &set("")));
        assert_eq!(gone.claim(), set("64-95,5000-5009"));
        // An error is no agreement: every shard.
        let failed = Peer {
            heard: Heard::Failed("function snowid_citus_claim(integer, text) is not unique".into()),
            ..silent(2)
        };
        assert_eq!(failed.claim(), ShardSet::all());
        assert!(failed.unsettled() && gone.unsettled() && !hand.unsettled());
        // Known only from its own question: what it told.
        let told = told_by_the_coordinator();
        assert_eq!(told.claim(), block(0).unwrap());
        // Known from another database's cluster: what it claimed there.
        let remembered = Peer {
            heard: Heard::Remembered(set("0-31,99")),
            recorded: None,
            ..silent(0)
        };
        assert_eq!(remembered.claim(), set("0-31,99"));
        assert!(!told.unsettled() && !remembered.unsettled());
    }

    #[test]
    fn two_nodes_in_one_group_overlap_on_its_block() {
        // The coordinator asks a worker that stop_metadata_sync_to_node reset to group 0.
        let coordinator = check(
            &block(0).unwrap(),
            &block(0).unwrap(),
            &[answered("w1", 1, answer(0, &ShardSet::all(), &set("0-31")))],
            ABOVE,
        );
        assert_eq!(coordinator.generating, set(""));
        assert_eq!(coordinator.shared[0], block(0).unwrap());
        // The worker, told by the coordinator's question.
        let worker = check(
            &block(0).unwrap(),
            &block(0).unwrap(),
            &[told_by_the_coordinator()],
            ABOVE,
        );
        assert_eq!(worker.generating, set(""));
    }

    #[test]
    fn shards_set_by_hand_beyond_the_block_wait_until_every_node_asked_has_heard_them() {
        let mine = set("40-45,6000-6009");
        let unreachable = |heard: &str| Peer {
            heard_ours: Some(set(heard)),
            ..silent(2)
        };
        // The second worker cannot be reached and never heard 6000-6009: refused for it.
        let verdict = check(&mine, &block(1).unwrap(), &[unreachable("")], ABOVE);
        assert_eq!(verdict.generating, set("40-45"));
        assert_eq!(verdict.shared[0], set("6000-6009"));
        // It heard them before it could no longer be reached: they stand.
        let verdict = check(
            &mine,
            &block(1).unwrap(),
            &[unreachable("40-45,6000-6009")],
            ABOVE,
        );
        assert_eq!(verdict.generating, mine);
        // A node this node cannot ask (known by its question) does not hold them up.
        let verdict = check(
            &mine,
            &block(1).unwrap(),
            &[told_by_the_coordinator()],
            ABOVE,
        );
        assert_eq!(verdict.generating, mine);
    }

    #[test]
    fn a_node_refuses_what_another_claims_and_keeps_the_rest() {
        let peers = [
            silent(0),
            answered("w2", 2, answer(2, &set("40-49,70"), &set(""))),
        ];
        let verdict = check(&block(1).unwrap(), &block(1).unwrap(), &peers, ABOVE);
        assert_eq!(verdict.generating, set("32-39,50-63"));
        assert_eq!(verdict.shared, [set(""), set("40-49")]);
        assert_eq!(verdict.refused(), set("40-49"));
        // Set by hand into group 0's block: refused even though the coordinator did not answer.
        let verdict = check(&set("20-40"), &block(1).unwrap(), &peers, ABOVE);
        assert_eq!(verdict.generating, set("32-39"));
        assert_eq!(verdict.shared[0], set("20-31"));
    }

    #[test]
    fn ids_issued_before_a_join_refuse_their_shards_until_they_are_in_the_past() {
        let issued = Issued {
            shards: set("2-5"),
            last_id: (1000 << 23) | (3 << 10) | 7,
        };
        let joined = answered(
            "w3",
            3,
            Answer {
                issued: Some(issued.clone()),
                ..answer(3, &ShardSet::all(), &set(""))
            },
        );
        let coordinator = &block(0).unwrap();
        // This node's next IDs dated at a millisecond: above the last from the next one on.
        let at = |ms: i64| move |_: usize, id: i64| (id >> 23) < ms;
        let refused = |above: &dyn Fn(usize, i64) -> bool| {
            check(
                coordinator,
                coordinator,
                std::slice::from_ref(&joined),
                above,
            )
            .refused()
        };
        assert_eq!(refused(&at(1000)), set("2-5"));
        assert_eq!(refused(&at(999)), set("2-5"));
        assert_eq!(refused(&at(1001)), set(""));
        // Above it on some shards only (resumed there, say).
        let some = |shard: usize, _: i64| shard > 3;
        assert_eq!(
            check(coordinator, coordinator, &[joined], some).refused(),
            set("2-3")
        );
    }

    #[test]
    fn a_check_is_out_of_date_when_the_other_claim_changes() {
        let mine = block(2).unwrap();
        let theirs = set("64-70");
        let verdict = check(
            &mine,
            &mine,
            &[answered("w1", 1, answer(1, &theirs, &set("")))],
            ABOVE,
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
    fn free_blocks_are_never_given_out_and_removed_ones_are_told_apart() {
        // Groups 0 to 3 given (2 removed since), a node in group 300, a claim by hand.
        let free = free_blocks(3, [0, 1, 3, 300], [&set("130")]);
        assert!(!free.contains(128) && free.contains(160), "{free}");
        assert!(
            !free.contains(64),
            "a removed node's block is never free: {free}"
        );
        assert_eq!(free.len() % SHARDS_PER_GROUP, 0);
        assert_eq!(first_block(&free), block(5).unwrap());
        assert_eq!(
            removed_blocks(3, [0, 1, 3, 300], [&set("130")]),
            block(2).unwrap()
        );
        // 256 groups given out (219 adds and removes, say): nothing is free.
        assert_eq!(free_blocks(255, [0, 1, 256], []), set(""));
        assert_eq!(free_blocks(300, [], []), set(""));
        assert_eq!(removed_blocks(255, [0, 1, 256], []), set("64-8191"));
        assert_eq!(first_block(&set("")), set(""));
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

    /// What a check learns of a node: its answer, or one of the ways of not having it.
    fn heard(answer: Answer) -> impl Strategy<Value = Heard> {
        prop_oneof![
            3 => Just(Heard::Answered(Box::new(answer))),
            1 => Just(Heard::Unreachable("failed to connect".into())),
            1 => Just(Heard::Older),
            1 => Just(Heard::Failed("an error".into())),
        ]
    }

    proptest! {
        /// Whatever two nodes claim, whatever group each takes itself to be in and each other's
        /// record has it in, and whether or not each answered the other (one that does not answer
        /// is taken at its group's block here, one that answers with an error at every shard),
        /// the shards they generate for after checking against each other are disjoint, within
        /// what each claims, unless neither heard the other and a claim lies outside the
        /// other's group's block; and the default configuration loses nothing to another node
        /// left at the default in a group of its own.
        #[test]
        fn two_nodes_that_checked_never_share_a_shard(
            group_a in 0i32..300, group_b in 0i32..300,
            recorded_a in 0i32..300, recorded_b in 0i32..300,
            configured_a in configured(), configured_b in configured(),
            heard_a in heard(Answer { group: 0, by_hand: false, claims: ShardSet::empty(), given: -1, issued: None, mask_keys: None }),
            heard_b in heard(Answer { group: 0, by_hand: false, claims: ShardSet::empty(), given: -1, issued: None, mask_keys: None }),
        ) {
            let (claim_a, claim_b) = (claim(&configured_a, group_a), claim(&configured_b, group_b));
            let none = ShardSet::empty();
            let real = |heard: Heard, answer: Answer| match heard {
                Heard::Answered(_) => Heard::Answered(Box::new(answer)),
                other => other,
            };
            // A hears B (recorded in `recorded_b` by A), and B hears A.
            let b_seen = peer("b", recorded_b, real(heard_b, answer(group_b, &configured_b, &none)));
            let a_seen = peer("a", recorded_a, real(heard_a, answer(group_a, &configured_a, &none)));
            let a = check(&claim_a, &block_or_none(group_a), std::slice::from_ref(&b_seen), ABOVE);
            let b = check(&claim_b, &block_or_none(group_b), std::slice::from_ref(&a_seen), ABOVE);
            // A sees all of B's claim when B answered (or failed), or when B's claim is its
            // recorded group's block.
            let sees = |peer: &Peer, real_claim: &ShardSet| real_claim.is_subset(&peer.claim());
            if sees(&b_seen, &claim_b) || sees(&a_seen, &claim_a) {
                prop_assert!(a.generating.is_disjoint(&b.generating));
            }
            prop_assert!(a.generating.is_subset(&claim_a));
            prop_assert_eq!(a.generating.union(&a.refused()), claim_a.clone());
            let default_apart = !by_hand(&configured_a) && !by_hand(&configured_b)
                && group_a != group_b && recorded_b == group_b;
            if default_apart && matches!(b_seen.heard, Heard::Answered(_)) {
                prop_assert_eq!(a.generating, claim_a);
            }
        }

        /// Two nodes, each claiming what it claims, set in either order while they cannot reach
        /// each other: the one set first was heard by the other (it answered its questions then),
        /// the one set later was not. Whatever they claim, they never generate for one shard.
        #[test]
        fn nodes_set_while_apart_never_share_a_shard(
            group_a in 0i32..300, group_b in 0i32..300,
            configured_a in configured(), configured_b in configured(),
        ) {
            prop_assume!(group_a != group_b);
            let (claim_a, claim_b) = (claim(&configured_a, group_a), claim(&configured_b, group_b));
            // A was set first, and B heard it; B, set later, is unreachable from A and unheard.
            let cut_off = || Heard::Unreachable("cut off".into());
            let seen_by_a = Peer {
                last: Some(answer(group_b, &ShardSet::all(), &ShardSet::empty())),
                heard_ours: Some(claim_a.clone()),
                ..peer("b", group_b, cut_off())
            };
            let seen_by_b = Peer {
                last: Some(answer(group_a, &configured_a, &ShardSet::empty())),
                heard_ours: Some(ShardSet::empty()),
                ..peer("a", group_a, cut_off())
            };
            let a = check(&claim_a, &block_or_none(group_a), &[seen_by_a], ABOVE);
            let b = check(&claim_b, &block_or_none(group_b), &[seen_by_b], ABOVE);
            prop_assert!(a.generating.is_disjoint(&b.generating));
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
                let peers: Vec<Peer> = groups.iter().filter(|&&g| g != group).map(|&g| {
                    answered(&g.to_string(), g, answer(g, &ShardSet::all(), &ShardSet::empty()))
                }).collect();
                let verdict = check(&claim(&ShardSet::all(), group), &block(group).unwrap(), &peers, ABOVE);
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
            let peer = answered("p", group, answer(group, &theirs, &ShardSet::empty()));
            let verdict = check(&claim_mine, &block_or_none(0), std::slice::from_ref(&peer), ABOVE);
            prop_assert!(!out_of_date(&claim_mine, &verdict.refused(), &verdict.shared[0], &peer.claim()));
        }

        /// Free blocks never meet a group given out, a node's group or a claim.
        #[test]
        fn free_blocks_meet_nothing_given(
            given in -1i32..300, groups in prop::collection::vec(0i32..300, 0..8),
            claims in prop::collection::vec(configured(), 0..3),
        ) {
            let free = free_blocks(given, groups.iter().copied(), claims.iter());
            for g in (0..=given).chain(groups.iter().copied()) {
                prop_assert!(free.is_disjoint(&block_or_none(g)));
            }
            for c in &claims {
                prop_assert!(free.is_disjoint(c));
            }
        }
    }
}
