//! Every error a user can meet, each with a real SQLSTATE, a lowercase message, and a detail
//! and hint where they help. Each function is `#[track_caller]`, so a report's LOCATION names
//! the line that raised it, not this file.
//!
//! | SQLSTATE | when |
//! |---|---|
//! | 22003 | a shard or sequence number outside its field, or a negative ID (or masked ID) |
//! | F0000 | at start-up: a mask key file that cannot be used (read, owned, permitted or parsed), or 0.7.0's `snowid.mask_key` still set |
//! | 22004 | `snowid_fill_id` found no key to derive a shard from; a null in an operator function's array argument |
//! | 22008 | a timestamp outside the range the epoch can encode, or an infinite bound |
//! | 22023 | a malformed setting, a non-integral shard, a mask key version the database lacks, a malformed masked ID prefix, a bad argument (partition step, resume, a take-back above another shard's ID, another Citus node's claim) |
//! | 22P02 | a text that is not a masked ID's text form (or names a key version the database lacks, or lacks its prefix) |
//! | 25006 | generating on a hot standby or in a read-only transaction |
//! | 42703, 42804, 39P01 | `snowid_fill_id` used on a column that does not exist or is of the wrong type, or outside a row-level BEFORE INSERT trigger |
//! | 42501, 42P01 | `snowid_partition_ddl` on a table the caller has no privilege on, or that does not exist |
//! | 42809 | `snowid_partition_ddl` on a table that is not range-partitioned by one bigint column; `snowid_convert_column` on a relation that is not a table |
//! | 42501, 42703, 42804 | `snowid_convert_column` by a caller who does not own the table, of a column that does not exist or is not `bigint` |
//! | 42P07 | `snowid_partition_ddl` would reuse a name taken by another relation |
//! | 54000 | the time field is exhausted; too many partitions asked for |
//! | 53400 | no background worker free to read another database for a resume, or to record a release in it |
//! | 55000 | masking with no key file named, none for the database, or without preloading; generating without preloading, for a shard not owned or released, on a Citus node for a shard another node claims too or issued IDs for, with no shards or every shard released (or while its shards cannot be learnt from Citus), before the epoch, after the epoch moved later, or while fenced (a lost, stale, unreadable or upgraded state); converting a column with another default, with values at or above the first ID, or below which a table cannot be read (a foreign table, another session's temporary table); releasing or taking back while fenced or in single-user mode; taking back a shard not released; a resume while transactions are prepared, above keys it could not read or that are dated further ahead than snowid issues and than accepted, or that cannot tell which shards were released |
//! | 55P03 | snowid's cluster-wide lock held past its bound by another release, take-back, fence lift, install's commit or `CREATE DATABASE` |
//! | 0A000 | preparing a transaction that installed or updated snowid |
//! | 57014 | the synchronous standbys did not confirm a change of the durable state before a cancel: the error names the change, which holds on this server; a release cancelled before it was durable: the error says it was not made |
//! | (the cause's) | a database a resume reads, or a change records in, failed: its own SQLSTATE (a missing file, a damaged page, a lock on a table, a record or the database itself held past the bound (55P03), ...), with the database named |
//! | XX001 | the durable state's pages are damaged |

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgSqlErrorCode::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};
use snowid_core::durable::{Change, Fence, Unavailable, RELATION_NUMBER};
use snowid_core::epoch;
use snowid_core::layout::{self, MAX_SEQ, MAX_SHARD};

#[track_caller]
fn raise(code: PgSqlErrorCode, message: String, detail: Option<String>, hint: Option<String>) -> ! {
    let mut report = ErrorReport::new(code, message, "snowid");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// A SQLSTATE's five characters, as PostgreSQL's `unpack_sql_state` writes them.
pub fn sqlstate(code: PgSqlErrorCode) -> String {
    sqlstate_of(code as isize as i32)
}

/// The five characters of a SQLSTATE packed as PostgreSQL's `ErrorData` holds it.
pub fn sqlstate_of(packed: i32) -> String {
    let packed = i64::from(packed);
    (0..5)
        .map(|i| char::from(((packed >> (6 * i)) & 0x3F) as u8 + b'0'))
        .collect()
}

/// The error code of a SQLSTATE's five characters (XX000 for anything else).
fn code_of(sqlstate: &str) -> PgSqlErrorCode {
    let bytes = sqlstate.as_bytes();
    if bytes.len() != 5 {
        return ERRCODE_INTERNAL_ERROR;
    }
    let packed = (0..5).fold(0isize, |packed, i| {
        packed + ((isize::from(bytes[i]).wrapping_sub(isize::from(b'0')) & 0x3F) << (6 * i))
    });
    PgSqlErrorCode::from(packed)
}

/// The date the time field runs out under an epoch: 2^40 ms after it.
pub fn exhaustion_date(epoch_unix_ms: i64) -> String {
    epoch::format(layout::exhaustion_unix_ms(epoch_unix_ms))
}

#[track_caller]
pub fn shard_out_of_range(shard: impl std::fmt::Display) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("snowid shard {shard} is out of range"),
        Some(format!(
            "Shards run from 0 to {MAX_SHARD}: the layout gives the shard 13 bits."
        )),
        None,
    )
}

#[track_caller]
pub fn shard_not_integral(shard: f64) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("snowid shard {shard} is not an integer"),
        None,
        Some("Pass a whole number from 0 to 8191.".into()),
    )
}

#[track_caller]
pub fn shard_not_owned(shard: i32, shards_text: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowid shard {shard} is not owned by this server"),
        Some(format!("snowid.shards is '{shards_text}'.")),
        Some(format!(
            "Generate IDs for shard {shard} on the server that owns it, or hand it over to this \
             one: snowid_release({shard}) where it is generated now, then \
             snowid_resume_above(<the ID that returns>) here, and add it to snowid.shards."
        )),
    )
}

#[track_caller]
pub fn no_shard_owned(shards_text: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "this server owns no snowid shard it may generate for".into(),
        Some(format!(
            "snowid_next() picks one of this server's own shards; snowid.shards is '{shards_text}', \
             and any shard released with snowid_release() is excluded."
        )),
        Some("Give the server shards of its own in snowid.shards (such as '0-99') and reload.".into()),
    )
}

/// A Citus node, as the errors of the check on Citus name it (see `crate::server::citus`,
/// whose report carries one for each node).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CitusNode {
    /// `host:port`, or a description where Citus does not record it.
    pub name: String,
    /// Its group in Citus's record of the nodes here; `None` for a node not in it.
    pub group: Option<i32>,
    /// The group it takes itself to be in, where it said.
    pub own_group: Option<i32>,
    /// Whether `snowid.shards` sets its shards; `None` where it did not say.
    pub by_hand: Option<bool>,
    /// The shards it claims.
    pub claim: String,
    /// Why it did not answer, or how it is known without an answer.
    pub unanswered: Option<String>,
    /// Shards it issued IDs for outside its claim since it started, and the highest such ID.
    pub issued: Option<(String, i64)>,
}

impl CitusNode {
    /// Such as `127.0.0.1:9701 (Citus group 1)`, or with the group it takes itself to be in
    /// where that differs.
    fn named(&self) -> String {
        let group = match (self.group, self.own_group) {
            (Some(g), Some(own)) if g != own => {
                format!("Citus group {g} here, but it takes itself to be in group {own}")
            }
            (Some(g), _) => format!("Citus group {g}"),
            (None, Some(own)) => {
                format!(
                    "not in Citus's record of the nodes here; it takes itself to be in group {own}"
                )
            }
            (None, None) => "not in Citus's record of the nodes here".into(),
        };
        format!("{} ({group})", self.name)
    }

    /// " (`name`)", or nothing where it has no name.
    fn parenthesized(&self) -> String {
        match self.name.as_str() {
            "this node" => String::new(),
            name => format!(" ({name})"),
        }
    }

    /// "this one", or "this one (`name`)" where it has a name.
    fn this_one(&self) -> String {
        match self.name.as_str() {
            "this node" => "this one".into(),
            name => format!("this one ({name})"),
        }
    }

    /// "This node, `name` (group)", or "This node (group)" where it has no name.
    fn this_node(&self) -> String {
        match self.name.as_str() {
            "this node" => format!("This node{}", &self.named()["this node".len()..]),
            _ => format!("This node, {}", self.named()),
        }
    }

    /// What it claims, and why.
    fn claims(&self) -> String {
        let shards = match self.claim.as_str() {
            "" => "no shards".to_string(),
            claim => format!("shards {claim}"),
        };
        let why = match (&self.unanswered, self.by_hand) {
            (Some(why), _) if self.claim == "0-8191" => {
                format!("every shard, since {why}, which is never taken as agreement")
            }
            (Some(why), _) => format!("{shards} ({why})"),
            (None, Some(true)) => format!("{shards}, set by snowid.shards"),
            (None, _) => format!("{shards}, its group's own"),
        };
        match &self.issued {
            Some((issued, last)) => {
                format!("{why}, and issued IDs up to {last} for shards {issued} outside its claim")
            }
            None => why,
        }
    }
}

/// The hint of every refusal for shards another node claims too.
fn citus_overlap_hint(free: &str) -> String {
    let free = match free {
        "" => String::new(),
        free => format!(" (no Citus group has been given {free})"),
    };
    format!(
        "Give each node shards no other node claims: on the node whose snowid.shards is set, \
         reset it to take its group's own shards, or set shards no other node claims{free}, and \
         reload. A node that takes itself to be in another group than Citus's record here gives \
         it needs its metadata synced again (start_metadata_sync_to_node on the coordinator)."
    )
}

#[track_caller]
pub fn citus_shard_shared(
    shard: i32,
    this: &CitusNode,
    other: &CitusNode,
    shared: &str,
    free: &str,
) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowid shard {shard} is claimed by two Citus nodes, {} and {}",
            this.this_one(),
            other.name
        ),
        Some(format!(
            "{} claims {}; {} claims {}. Neither generates for the shards both claim, {shared}, \
             so that no ID is issued twice.",
            this.this_node(),
            this.claims(),
            other.named(),
            other.claims()
        )),
        Some(citus_overlap_hint(free)),
    )
}

/// A shard of this node's claim that another node issued IDs for outside its own claim (before
/// it joined the cluster), up to `last_id`, dated at or after this node's clock now.
#[track_caller]
pub fn citus_shard_issued_elsewhere(
    shard: i32,
    this: &CitusNode,
    other: &CitusNode,
    last_id: i64,
) -> ! {
    let issued = other
        .issued
        .as_ref()
        .map_or("", |(shards, _)| shards.as_str());
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowid shard {shard} was used by {} outside its claim, up to IDs this node could \
             issue again",
            other.name
        ),
        Some(format!(
            "{} issued IDs for shards {issued} since it started (before it took its shards from \
             its Citus group: it generated on its own before it joined the cluster, say), up to \
             ID {last_id}, which is dated at or after this node's clock now. {} claims {}, and \
             refuses those shards until its IDs for them are above that one.",
            other.named(),
            this.this_node(),
            this.claims()
        )),
        Some(format!(
            "Resume this node above that node's IDs now: SELECT snowid_resume_above({last_id}); \
             and keep the rows that node keyed before it joined out of the cluster's tables, or \
             give them new keys: they can carry IDs this node issued too."
        )),
    )
}

#[track_caller]
pub fn citus_shard_not_this_nodes(shard: i32, this: &CitusNode) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowid shard {shard} is not owned by this server"),
        Some(format!(
            "On Citus: {} claims {}.",
            this.this_node(),
            this.claims()
        )),
        Some(
            "Call snowid_next() without a shard for one of this node's own, or insert through \
             the node whose shard it is."
                .into(),
        ),
    )
}

/// What the hint of a node with no shards of its own can offer: blocks no Citus group has been
/// given (`free`), or else blocks of groups given to nodes since removed (`removed`, free only
/// once those nodes are stopped for good, and after a resume above their IDs).
pub struct CitusSpare {
    pub free: String,
    pub removed: String,
    pub removed_range: Option<(usize, usize)>,
}

/// `snowid_next()` on a Citus node whose group is past the capacity: it claims no shard.
#[track_caller]
pub fn citus_past_capacity(this: &CitusNode, capacity: (usize, usize), spare: &CitusSpare) -> ! {
    let (groups, per_group) = capacity;
    let hint = match (spare.free.as_str(), spare.removed_range) {
        ("", Some((first, last))) => format!(
            "Every group's shards have been given out, to the nodes of the cluster or to nodes \
             removed since, which may still run. A removed node's shards can be given to this \
             one once that node is stopped for good: resume this node above their highest ID \
             first (SELECT snowid_resume_above(max(id)) FROM <each table keyed by snowid> WHERE \
             snowid_shard(id) BETWEEN {first} AND {last}; then SELECT \
             snowid_resume_above(<that ID>) here), then set snowid.shards = '{first}-{last}' on \
             this node and reload. Removed groups' shards: {}.",
            spare.removed
        ),
        ("", None) => "Every shard is claimed by a node of the cluster: give this node shards \
                       another node gives up (snowid_release on that node, then snowid.shards \
                       here)."
            .into(),
        (free, _) => format!(
            "Set snowid.shards on this node to shards no Citus group has been given, such as \
             {free} (no node claims them), and reload."
        ),
    };
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "this Citus node has no snowid shards: its group, {}, is past the {groups} groups \
             that get shards of their own",
            this.own_group.or(this.group).unwrap_or(-1)
        ),
        Some(format!(
            "snowid gives each Citus group {per_group} shards of its own, groups 0 to {}, and \
             Citus never gives a group number twice: a cluster that added and removed many \
             nodes can run past them. This node is {}.",
            groups - 1,
            this.name
        )),
        Some(hint),
    )
}

/// `snowid_next()` on a Citus node every shard of whose claim another node claims too
/// (`sharers`, each with the shards it shares).
#[track_caller]
pub fn citus_no_shard(this: &CitusNode, sharers: &[CitusSharer], free: &str) -> ! {
    let others: Vec<String> = sharers
        .iter()
        .map(|sharer| {
            let unheard = match sharer.unheard.as_str() {
                "" => String::new(),
                unheard => format!(", and it has not heard this node claim {unheard}"),
            };
            format!(
                "{} claims {} (shared: {}){unheard}",
                sharer.node.named(),
                sharer.node.claims(),
                sharer.shared
            )
        })
        .collect();
    let names = sharers
        .iter()
        .map(|sharer| sharer.node.name.as_str())
        .collect::<Vec<_>>()
        .join(" and ");
    let only_unheard = sharers.iter().all(|sharer| sharer.shared == sharer.unheard);
    let why = match only_unheard {
        true => format!("{names} has not heard it claim its shards"),
        false => format!("{names} claims its shards too"),
    };
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "this Citus node{} has no snowid shard to generate for: {why}",
            this.parenthesized(),
        ),
        Some(format!(
            "{} claims {}; {}. Neither generates for the shards both claim, so that no ID is \
             issued twice; shards set by hand beyond this node's group's own wait until every node \
             this node asks has heard it claim them.",
            this.this_node(),
            this.claims(),
            others.join("; ")
        )),
        Some(match only_unheard {
            true => citus_unheard_hint(),
            false => citus_overlap_hint(free),
        }),
    )
}

/// Another node that keeps this node from some of its shards: those it `shared` (claims too,
/// issued IDs for, or has not heard this node claim), and of them those it has not heard.
pub struct CitusSharer {
    pub node: CitusNode,
    pub shared: String,
    pub unheard: String,
}

/// The hint of a refusal for shards set by hand that a node has not heard this node claim.
fn citus_unheard_hint() -> String {
    "Connect the nodes again: this node asks them every 2 seconds, and generates for those shards \
     once every node has answered. Or set shards within this node's group's own, which need no \
     answer."
        .into()
}

/// A shard set by hand beyond this node's group's own that `other`, which this node asks, has not
/// heard it claim (it could not be asked).
#[track_caller]
pub fn citus_shard_unheard(shard: i32, this: &CitusNode, other: &CitusNode) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowid shard {shard} is set by hand on this Citus node, and {} has not heard it \
             claimed",
            other.name
        ),
        Some(format!(
            "{} claims {}. A shard set by hand beyond a node's group's own is generated for only \
             once every node that node asks has heard it claimed, so that two nodes set to the \
             same shards while they cannot reach each other never both generate for them; {} \
             claims {}.",
            this.this_node(),
            this.claims(),
            other.named(),
            other.claims()
        )),
        Some(citus_unheard_hint()),
    )
}

/// `snowid_next()` on a Citus node that released every shard of its claim.
#[track_caller]
pub fn citus_all_released(this: &CitusNode) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "this Citus node{} has no snowid shard to generate for: every shard of its claim is \
             released",
            this.parenthesized()
        ),
        Some(format!(
            "{} claims {}, and snowid_release() released each of them here.",
            this.this_node(),
            this.claims()
        )),
        Some(
            "Take a shard back with snowid_take_back(shard, <the last ID its other owner \
             issued>) once no other server generates for it, or give this node other shards \
             with snowid.shards."
                .into(),
        ),
    )
}

/// A Citus node whose check of its shards could not be made.
#[track_caller]
pub fn citus_check_failed(database: &str, why: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid has not learnt this node's shards from Citus".into(),
        Some(format!(
            "Citus is preloaded, so snowid takes this node's shards from Citus's metadata in \
             database \"{database}\" (snowid.citus_database), and checks them against the \
             other nodes'; the last check could not be made: {}",
            detail_line(why)
        )),
        Some(
            "Set snowid.citus_database to the database where the citus extension is, and \
             reload; or remove citus from shared_preload_libraries where Citus is not used. \
             The check is made again every few seconds."
                .into(),
        ),
    )
}

/// A Citus node whose checker is not running.
#[track_caller]
pub fn citus_checker_not_running(database: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid has not learnt this node's shards from Citus".into(),
        Some(format!(
            "snowid's Citus check, a background worker connected to database \"{database}\" \
             (snowid.citus_database), is not running."
        )),
        Some(
            "The server log says why (a database that does not exist, or no background worker \
             slot free: max_worker_processes). Set snowid.citus_database to the database where \
             the citus extension is, and reload."
                .into(),
        ),
    )
}

#[track_caller]
pub fn shard_released(shard: i32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowid shard {shard} was released"),
        Some(format!(
            "snowid_release({shard}) handed it over, here or on the server whose WAL this one \
             replayed; no server holding this state issues IDs for it until it is taken back, \
             whatever snowid.shards says."
        )),
        Some(format!(
            "Generate IDs for shard {shard} where it was handed to. To take it back, release it \
             there and call snowid_take_back({shard}, <the ID that returns>) here."
        )),
    )
}

#[track_caller]
pub fn shard_not_released(shard: i32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowid shard {shard} is not released on this server"),
        Some(
            "snowid_take_back takes back only a shard that snowid_release handed off here.".into(),
        ),
        Some(
            "To make this server's IDs greater than an ID issued elsewhere, call \
             snowid_resume_above(<that ID>)."
                .into(),
        ),
    )
}

#[track_caller]
pub fn take_back_of_another_shard(shard: i32, id: i64, id_shard: i32) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("ID {id} belongs to snowid shard {id_shard}, not to shard {shard}"),
        Some(
            "A shard is taken back above an ID of its own: the last ID its other owner \
             returned from snowid_release."
                .into(),
        ),
        None,
    )
}

#[track_caller]
pub fn no_key_columns() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "no column of any database takes its values from snowid".into(),
        Some(
            "snowid_resume_above_columns() resumes above the highest value of every column whose \
             default calls snowid_next or that a snowid_fill_id trigger fills, in every database."
                .into(),
        ),
        Some(
            "If snowid keys live elsewhere (a column whose default was dropped, another \
             system), resume above the highest of them by hand: SELECT \
             snowid_resume_above(<that ID>);"
                .into(),
        ),
    )
}

/// What a resume that was refused had been told: the databases it was to leave out, and the ID
/// it was given (a resume by number), which every hint it gives keeps, so that no hint leads to
/// a resume below what the superuser said, or below keys the refused one read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Told<'a> {
    pub skipped: &'a [String],
    pub given: Option<i64>,
}

impl Told<'_> {
    /// The resume by number a hint gives: above `<that ID>` (the superuser's to find), and above
    /// `at_least` and the ID given, leaving out the databases skipped and `skip`.
    fn by_number(&self, at_least: Option<i64>, skip: &[&str]) -> String {
        let floor = at_least.into_iter().chain(self.given).max();
        let above = match floor {
            Some(floor) => format!("GREATEST(<that ID>, {floor})"),
            None => "<that ID>".into(),
        };
        format!(
            "SELECT snowid_resume_above({above}{});",
            self.skip_argument(skip)
        )
    }

    /// `, skip_databases => '{...}'` for the databases skipped and `skip`, or nothing.
    fn skip_argument(&self, skip: &[&str]) -> String {
        let mut all: Vec<&str> = self.skipped.iter().map(String::as_str).collect();
        all.extend(skip);
        all.sort_unstable();
        all.dedup();
        match all.is_empty() {
            true => String::new(),
            false => format!(", skip_databases => {}", text_array_literal(&all)),
        }
    }
}

/// A `text[]` literal of `items`, as a quoted SQL string: `'{a,"b c"}'`.
fn text_array_literal(items: &[&str]) -> String {
    let elements: Vec<String> = items
        .iter()
        .map(|item| {
            let plain = !item.is_empty()
                && !item.eq_ignore_ascii_case("null")
                && item
                    .chars()
                    .all(|c| !matches!(c, '{' | '}' | ',' | '"' | '\\') && !c.is_whitespace());
            match plain {
                true => item.to_string(),
                false => format!("\"{}\"", item.replace('\\', "\\\\").replace('"', "\\\"")),
            }
        })
        .collect();
    format!("'{{{}}}'", elements.join(",").replace('\'', "''"))
}

#[track_caller]
pub fn survey_failed(database: &str, sqlstate: &str, reason: &str, told: &Told) -> ! {
    raise(
        code_of(sqlstate),
        format!("snowid could not read the snowid keys of database \"{database}\""),
        Some(detail_line(&format!(
            "a resume reads the highest snowid key of every database first, and nothing was \
             changed; database \"{database}\": {reason}"
        ))),
        Some(format!(
            "Fix the cause and run it again; or, knowing the highest snowid key that database \
             holds, resume above it by number without reading it: {}",
            told.by_number(None, &[database])
        )),
    )
}

#[track_caller]
pub fn survey_needs_workers(database: &str) -> ! {
    raise(
        ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!("snowid could not start a background worker to read database \"{database}\""),
        Some(
            "Each database is read by a background worker of its own; none was free, or the \
             server runs in single-user mode. Nothing was changed."
                .into(),
        ),
        Some(
            "Run it again once a worker is free (raise max_worker_processes if this persists), \
             on a server started normally."
                .into(),
        ),
    )
}

#[track_caller]
pub fn transactions_prepared(transactions: &[String]) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid cannot resume while transactions are prepared".into(),
        Some(detail_line(&format!(
            "The rows of a prepared transaction are invisible until it commits, so a resume \
             could not see the snowid keys they hold; nothing was changed. Prepared: {}",
            transactions.join("; ")
        ))),
        Some(
            "Finish each with COMMIT PREPARED or ROLLBACK PREPARED (pg_prepared_xacts lists \
             them), then run the resume again."
                .into(),
        ),
    )
}

/// A key column a resume could not rise above, where, and why.
pub struct UnreadableColumn {
    pub database: String,
    pub table: String,
    pub column: String,
    pub why: String,
}

/// The highest key a refused resume read in the databases its hint leaves out, and where.
pub struct ReadThere {
    pub id: i64,
    pub database: String,
    pub table: String,
    pub column: String,
}

#[track_caller]
pub fn keys_unreadable(
    columns: &[UnreadableColumn],
    read_there: Option<&ReadThere>,
    told: &Told,
) -> ! {
    let list: Vec<String> = columns
        .iter()
        .map(|c| {
            format!(
                "{}.{} in database \"{}\": {}",
                c.table, c.column, c.database, c.why
            )
        })
        .collect();
    let databases: Vec<&str> = columns.iter().map(|c| c.database.as_str()).collect();
    let read = match read_there {
        Some(r) => format!(
            " What it could read of those databases goes up to key {}, in {}.{} of database \
             \"{}\": a resume that leaves them out must rise above that too.",
            r.id, r.table, r.column, r.database
        ),
        None => String::new(),
    };
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid cannot read every key of a column whose default calls snowid_next".into(),
        Some(detail_line(&format!(
            "a resume rises above the highest snowid key of every database, and cannot tell how \
             high these go, so nothing was changed: {}.{read}",
            list.join("; ")
        ))),
        Some(format!(
            "Fix what keeps them from being read and run the resume again. Or find the highest \
             snowid ID among them yourself and resume above it by number, without reading those \
             databases: {}",
            told.by_number(read_there.map(|r| r.id), &databases)
        )),
    )
}

#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn key_far_ahead(
    database: &str,
    table: &str,
    column: &str,
    key: i64,
    ahead_ms: i64,
    unreviewed_ms: i64,
    told: &Told,
) -> ! {
    let minutes = (ahead_ms + 59_999) / 60_000;
    let by_number = format!(
        "SELECT snowid_resume_above({}{});",
        told.given.map_or(key, |given| given.max(key)),
        told.skip_argument(&[])
    );
    // Accepting is for the resume of every column; a resume by number keeps its number.
    let accept = match told.given {
        Some(_) => String::new(),
        None => format!(
            "accept it: SELECT * FROM snowid_resume_above_columns(accept_ahead => '{minutes} \
             minutes'{}); or ",
            told.skip_argument(&[])
        ),
    };
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "the highest snowid key is dated {} ahead of this server's clock",
            duration(ahead_ms)
        ),
        Some(format!(
            "Key {key}, in {table}.{column} of database \"{database}\", is dated further ahead \
             than snowid issues ({} past the clock: snowid.max_lead and a minute), which a key \
             stored by hand can be; resuming above it would date every later ID after it. \
             Nothing was changed.",
            duration(unreviewed_ms)
        )),
        Some(format!(
            "If the key is genuine (this server's clock is behind, after a restore or a failover \
             to a server whose clock was set back), {accept}resume above it by number: \
             {by_number} otherwise correct or remove that row, and run the resume again."
        )),
    )
}

/// A duration in the unit that reads best.
fn duration(ms: i64) -> String {
    match ms {
        ..120_000 => format!("{:.1} s", ms as f64 / 1000.0),
        120_000..7_200_000 => format!("{:.1} minutes", ms as f64 / 60_000.0),
        _ => format!("{:.1} hours", ms as f64 / 3_600_000.0),
    }
}

#[track_caller]
pub fn releases_unknown(list: &[String]) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid cannot tell which shards this cluster released".into(),
        Some(detail_line(&format!(
            "The state was re-created, so it holds no release, and nothing else records the \
             released shards; lifting the fence could issue IDs for a shard handed to another \
             server. Nothing was changed ({})",
            list.join("; ")
        ))),
        Some(
            "Name the shards this cluster had released (snowid_info() or snowid_stats() on the \
             old cluster, or your own records), or none: SELECT * FROM \
             snowid_resume_above_columns(released => '{7,9}'); or released => '{}'."
                .into(),
        ),
    )
}

#[track_caller]
pub fn released_named_without_fence() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid_resume_above_columns(released => ...) names released shards only when it lifts a \
         fence"
            .into(),
        Some(
            "This server is not fenced: its state holds its releases. Nothing was changed.".into(),
        ),
        Some("Release a shard with SELECT snowid_release(<shard>);".into()),
    )
}

/// The databases that already hold a new record, for a detail.
fn already_written(written: &[String], what: &str) -> String {
    match written {
        [] => String::new(),
        _ => format!(
            " The records of database{} {} already {what}.",
            if written.len() == 1 { "" } else { "s" },
            written
                .iter()
                .map(|d| format!("\"{d}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[track_caller]
pub fn release_interrupted(shard: i32, sqlstate: &str, reason: &str, written: &[String]) -> ! {
    raise(
        code_of(sqlstate),
        format!("{reason}: snowid shard {shard} was not released"),
        Some(format!(
            "The release was stopped while it recorded the shard in every database, before it \
             was durable: shard {shard} issues IDs on this server again.{}",
            already_written(
                written,
                "list it as released, which keeps it refused after a lost state or pg_upgrade \
                 until the next release, take-back or resume that lifts a fence writes them"
            )
        )),
        Some(format!(
            "Run SELECT snowid_release({shard}); again to release it."
        )),
    )
}

#[track_caller]
pub fn release_not_recordable(
    shard: i32,
    database: &str,
    sqlstate: &str,
    reason: &str,
    written: &[String],
) -> ! {
    raise(
        code_of(sqlstate),
        format!("snowid cannot release shard {shard}: database \"{database}\" cannot record it"),
        Some(format!(
            "A release is recorded in every database where snowid is installed before it is made \
             durable, which is what keeps it through a lost state or pg_upgrade; shard {shard} \
             was not released, and issues IDs on this server again.{} Database \"{database}\": \
             {reason}",
            already_written(
                written,
                "list it as released, which keeps it refused after a lost state or pg_upgrade \
                 until the next release, take-back or resume that lifts a fence writes them"
            )
        )),
        Some(format!(
            "Fix the cause (a transaction holding a lock on that database, or on its \
             snowid_released_shards, shows in pg_locks), then run SELECT \
             snowid_release({shard}); again."
        )),
    )
}

#[track_caller]
pub fn take_back_not_recorded(
    shard: i32,
    database: Option<&str>,
    sqlstate: &str,
    reason: &str,
    written: &[String],
) -> ! {
    let (message, cause) = match database {
        Some(database) => (
            format!(
                "snowid shard {shard} was taken back, but database \"{database}\" could not \
                 record it"
            ),
            format!(" Database \"{database}\": {reason}"),
        ),
        None => (
            format!("{reason}: snowid shard {shard} was taken back, but not recorded everywhere"),
            String::new(),
        ),
    };
    raise(
        code_of(sqlstate),
        message,
        Some(format!(
            "The take-back is durable and in force: shard {shard} issues IDs on this server \
             again, also after a restart, and ROLLBACK does not undo that.{} The databases not \
             yet written still list shard {shard} as released: after a lost state or \
             pg_upgrade, the resume that lifts the fence would keep it released.{cause}",
            already_written(written, "say it is taken back")
        )),
        Some(
            "Once every database can be written, the next release, take-back or resume that \
             lifts a fence writes every record; or take the shard back again then."
                .into(),
        ),
    )
}

#[track_caller]
pub fn fence_lift_not_recorded(
    database: Option<&str>,
    sqlstate: &str,
    reason: &str,
    written: &[String],
) -> ! {
    let (message, cause) = match database {
        Some(database) => (
            format!(
                "snowid lifted its fence, but database \"{database}\" could not record the \
                 released shards"
            ),
            format!(" Database \"{database}\": {reason}"),
        ),
        None => (
            format!("{reason}: snowid lifted its fence, but did not record the released shards everywhere"),
            String::new(),
        ),
    };
    raise(
        code_of(sqlstate),
        message,
        Some(format!(
            "The resume is durable and in force: the fence is lifted, every shard it found \
             released stays released, and ROLLBACK does not undo that.{} A database not yet \
             written keeps its earlier record.{cause}",
            already_written(written, "list the released shards")
        )),
        Some(
            "Once every database can be written, SELECT snowid_release(<a released shard>); \
             writes every record again."
                .into(),
        ),
    )
}

#[track_caller]
pub fn cluster_lock_held(what: &str, bound: &str, holders: &str) -> ! {
    raise(
        ERRCODE_LOCK_NOT_AVAILABLE,
        format!("snowid's cluster-wide lock stayed held for {bound} by {holders}"),
        Some(format!(
            "A release, a take-back, a resume that lifts a fence, the commit of CREATE EXTENSION \
             snowid or ALTER EXTENSION snowid UPDATE, and CREATE DATABASE each take it, and none \
             waits for it longer than {bound}; {what} did not get it, and nothing was changed."
        )),
        Some(
            "Let that statement finish (pg_stat_activity shows it, pg_locks the lock: advisory, \
             database 0, classid 1936617335), or end it, and run this again."
                .into(),
        ),
    )
}

#[track_caller]
pub fn install_not_recorded(sqlstate: &str, reason: &str) -> ! {
    raise(
        code_of(sqlstate),
        "snowid could not record the released shards in this database".into(),
        Some(detail_line(&format!(
            "installing or updating snowid writes the shards the cluster released into \
             snowid_released_shards when the transaction commits, and could not: {reason}; \
             nothing was committed"
        ))),
        Some("Fix the cause and run the statement again.".into()),
    )
}

#[track_caller]
pub fn prepare_after_install() -> ! {
    raise(
        ERRCODE_FEATURE_NOT_SUPPORTED,
        "cannot PREPARE a transaction that installed or updated snowid".into(),
        Some(
            "Its database's record of the released shards is written when it commits, under a \
             lock that a prepared transaction would hold until COMMIT PREPARED."
                .into(),
        ),
        Some("Install or update snowid in a transaction of its own.".into()),
    )
}

#[track_caller]
pub fn null_in_argument(argument: &str) -> ! {
    raise(
        ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("{argument} must not contain nulls"),
        None,
        None,
    )
}

#[track_caller]
pub fn negative_accept_ahead() -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        "accept_ahead must not be negative".into(),
        None,
        Some(
            "Give how far ahead of this server's clock a key may be dated, such as '15 minutes'."
                .into(),
        ),
    )
}

#[track_caller]
pub fn single_user_mode(what: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("{what} cannot run in single-user mode"),
        Some(
            "It records the released shards in every database through background workers, \
             which single-user mode has none of. Nothing was changed."
                .into(),
        ),
        Some("Start the server normally and run it again.".into()),
    )
}

#[track_caller]
pub fn seq_out_of_range(seq: i32) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("snowid sequence number {seq} is out of range"),
        Some(format!(
            "Sequence numbers run from 0 to {MAX_SEQ}: the layout gives them 10 bits."
        )),
        None,
    )
}

#[track_caller]
pub fn negative_id(id: i64) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("snowid {id} is negative"),
        Some("snowid never issues negative IDs, so this value was not made by snowid.".into()),
        None,
    )
}

/// `what` is the function that needs shared memory, such as `snowid_next()`.
#[track_caller]
pub fn not_preloaded(what: &str) -> ! {
    raise_not_preloaded(format!(
        "{what} needs snowid's state in shared memory, which only exists when the server loads \
         snowid at start-up. Decoding works without it."
    ))
}

#[track_caller]
fn raise_not_preloaded(detail: String) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid must be loaded via shared_preload_libraries".into(),
        Some(detail),
        Some(
            "Add shared_preload_libraries = 'snowid' to postgresql.conf (keeping any libraries \
             already listed) and restart the server."
                .into(),
        ),
    )
}

#[track_caller]
pub fn during_recovery(what: &str) -> ! {
    raise(
        ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("cannot execute {what} during recovery"),
        Some("A hot standby replays the primary's IDs; generating here could repeat them.".into()),
        Some("Generate IDs on the primary. Decoding works on a standby.".into()),
    )
}

#[track_caller]
pub fn read_only_transaction(what: &str) -> ! {
    raise(
        ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("cannot execute {what} in a read-only transaction"),
        None,
        Some("Generate IDs in a read-write transaction, as for nextval().".into()),
    )
}

#[track_caller]
pub fn exhausted(epoch_unix_ms: i64) -> ! {
    raise(
        ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "snowid time field is exhausted since {}",
            exhaustion_date(epoch_unix_ms)
        ),
        Some(format!(
            "IDs count milliseconds since snowid.epoch ({}) in 40 bits; one more bit would make \
             them negative.",
            epoch::format(epoch_unix_ms)
        )),
        Some("New IDs need a new key space, such as a new table with a later snowid.epoch.".into()),
    )
}

#[track_caller]
pub fn epoch_moved_later(epoch_unix_ms: i64, recorded_epoch_unix_ms: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid.epoch is later than the epoch of IDs already issued".into(),
        Some(format!(
            "IDs on this cluster were issued under the epoch {}; under {} new IDs would sort below them.",
            epoch::format(recorded_epoch_unix_ms),
            epoch::format(epoch_unix_ms)
        )),
        Some(format!(
            "Set snowid.epoch back to '{}' (or earlier) and restart.",
            epoch::format(recorded_epoch_unix_ms),
        )),
    )
}

/// The way out of a fence.
pub const RESUME_HINT: &str = "As a superuser, in any database, run SELECT * FROM \
     snowid_resume_above_columns(); it resumes above the highest snowid key of every database.";

#[track_caller]
pub fn fenced(fence: Fence) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid will not generate IDs until a superuser resumes above the IDs already issued"
            .into(),
        Some(detail_line(&format!(
            "{}, so the IDs it issued before are unknown, and new ones could repeat them; this \
             lasts across restarts",
            fence.describe()
        ))),
        Some(RESUME_HINT.into()),
    )
}

#[track_caller]
pub fn state_unavailable(why: &Unavailable) -> ! {
    match why {
        Unavailable::Damaged(damage) => raise(
            ERRCODE_DATA_CORRUPTED,
            format!(
                "snowid's state in \"global/{}\" is damaged: {damage}",
                RELATION_NUMBER
            ),
            Some("No ID was issued past the last durable lease.".into()),
            Some(
                "Restart the server: snowid then creates its state again, fenced, and a \
                 superuser resumes above the IDs already issued."
                    .into(),
            ),
        ),
        Unavailable::NotReplicated(change) => not_replicated(change),
    }
}

/// A change is durable on this server, but the wait for the synchronous standbys to confirm it
/// was cancelled: the error says which change holds here, and what to do next.
#[track_caller]
fn not_replicated(change: &Change) -> ! {
    const WAITS: &str = "canceling the wait for the synchronous standbys to confirm";
    const STANDBYS: &str =
        "The synchronous standbys may not have it yet: one promoted now would not know it.";
    let (message, detail, hint) = match change {
        Change::Lease { .. } => (
            format!("{WAITS} snowid's lease"),
            "The lease is durable on this server but not confirmed on the synchronous standbys, \
             so no ID under it was handed out: one could repeat after a failover."
                .to_string(),
            None,
        ),
        Change::Release { shard, last_id } => (
            format!("{WAITS} the release of snowid shard {}", shard.get()),
            format!(
                "Shard {} is released on this server, durably, at last ID {last_id}: no statement \
                 here issues another ID for it, also after a restart, and ROLLBACK does not undo \
                 that. {STANDBYS}",
                shard.get()
            ),
            Some(format!(
                "Once the standbys answer, run SELECT snowid_release({}); again: it returns the \
                 same last ID and waits for them before you hand the shard over.",
                shard.get()
            )),
        ),
        Change::Resume { above_id, .. } => (
            format!("{WAITS} snowid's resume above ID {above_id}"),
            format!(
                "The resume is durable on this server: its fence, if it had one, is lifted, and \
                 every ID it issues from now on is above ID {above_id}, also after a restart; \
                 ROLLBACK does not undo that. {STANDBYS}"
            ),
            Some(
                "Once the standbys answer, run the statement again: it changes nothing more, \
                 and waits for them."
                    .to_string(),
            ),
        ),
        Change::TakeBack { above_id, .. } => {
            let shard = layout::decompose(*above_id).map_or(-1, |p| p.shard);
            (
                format!("{WAITS} snowid's take-back of shard {shard}"),
                format!(
                    "Shard {shard} is taken back on this server, durably: it issues IDs for it \
                     again, above ID {above_id}, also after a restart; ROLLBACK does not undo \
                     that. {STANDBYS}"
                ),
                Some(
                    "Once the standbys answer, generate one ID for the shard, which waits for \
                     them to confirm a lease, before relying on the take-back elsewhere."
                        .to_string(),
                ),
            )
        }
        Change::Init(header) => (
            format!("{WAITS} the creation of snowid's state"),
            format!(
                "snowid's state in \"global/{RELATION_NUMBER}\" was created on this server, \
                 durably, {}. {STANDBYS}",
                match header.fence {
                    None => "as a first start".to_string(),
                    Some(fence) => format!("fenced: {}", fence.describe()),
                }
            ),
            Some(
                "Once the standbys answer, run the statement again: the state is there, and is \
                 not created twice."
                    .to_string(),
            ),
        ),
        Change::Promotion { timeline, .. } => (
            format!("{WAITS} snowid's first load on timeline {timeline}"),
            format!(
                "snowid recorded on this server, durably, that it now writes on timeline \
                 {timeline}, and raised its time base as snowid.promotion_margin says; no ID was \
                 handed out. {STANDBYS}"
            ),
            Some("Run the statement again once the standbys answer.".to_string()),
        ),
        Change::Lease020 { .. } => (
            format!("{WAITS} a change of snowid's state"),
            STANDBYS.to_string(),
            None,
        ),
    };
    raise(ERRCODE_QUERY_CANCELED, message, Some(detail), hint)
}

#[track_caller]
pub fn interrupted() -> ! {
    raise(
        ERRCODE_QUERY_CANCELED,
        "canceling statement while snowid waited".into(),
        None,
        None,
    )
}

#[track_caller]
pub fn clock_before_epoch(epoch_unix_ms: i64, now_unix_ms: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "the system clock is before snowid.epoch".into(),
        Some(format!(
            "The clock reads {}, the epoch is {}.",
            epoch::format(now_unix_ms),
            epoch::format(epoch_unix_ms)
        )),
        Some(
            "Correct the system clock, or wait until it passes the epoch; a snowid.epoch set \
             in the future by mistake is changed in postgresql.conf, followed by a restart."
                .into(),
        ),
    )
}

#[track_caller]
pub fn resume_too_far_ahead(floor_unix_ms: i64, now_unix_ms: i64) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        "snowid_resume_above would move the time base more than a day ahead".into(),
        Some(format!(
            "The ID is dated {}; this server's time is {}.",
            epoch::format(floor_unix_ms - 1),
            epoch::format(now_unix_ms)
        )),
        Some(
            "Check that the ID was issued under this server's snowid.epoch, and the clocks of \
             both servers."
                .into(),
        ),
    )
}

#[track_caller]
pub fn timestamp_out_of_range(what: &str, epoch_unix_ms: i64) -> ! {
    raise(
        ERRCODE_DATETIME_FIELD_OVERFLOW,
        format!("timestamp {what} cannot be encoded in a snowid"),
        Some(format!(
            "snowid IDs cover {} to {} under the current snowid.epoch.",
            epoch::format(epoch_unix_ms),
            epoch::format(layout::exhaustion_unix_ms(epoch_unix_ms) - 1)
        )),
        None,
    )
}

#[track_caller]
pub fn epoch_argument_not_finite() -> ! {
    raise(
        ERRCODE_DATETIME_FIELD_OVERFLOW,
        "the epoch given to snowid_timestamp must be a finite timestamp".into(),
        Some(
            "IDs count milliseconds from the epoch, so it cannot be infinity or -infinity.".into(),
        ),
        None,
    )
}

#[track_caller]
pub fn invalid_epoch(text: &str, detail: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"snowid.epoch\": \"{text}\""),
        Some(detail_line(detail)),
        Some(
            "Use an ISO 8601 timestamp with a UTC offset, such as '2011-08-24 21:07:01.721+00'."
                .into(),
        ),
    )
}

/// An argument error of `snowid_partition_ddl` and friends, with SQLSTATE 22023 or 22008.
#[track_caller]
pub fn bad_argument(code: PgSqlErrorCode, message: String, hint: Option<&str>) -> ! {
    raise(code, message, None, hint.map(Into::into))
}

/// A catalog query that cannot fail did: an internal error, said plainly.
#[track_caller]
pub fn catalog_read_failed(error: &dyn std::fmt::Display) -> ! {
    raise(
        ERRCODE_INTERNAL_ERROR,
        format!("snowid could not read the catalogs: {error}"),
        None,
        None,
    )
}

#[track_caller]
pub fn too_many_partitions(max_partitions: i32) -> ! {
    raise(
        ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!("snowid_partition_ddl would emit more than {max_partitions} partitions"),
        None,
        Some("Pass a larger max_partitions, a longer step, or a shorter period.".into()),
    )
}

#[track_caller]
pub fn no_such_relation(oid: pgrx::pg_sys::Oid) -> ! {
    raise(
        ERRCODE_UNDEFINED_TABLE,
        format!("relation with OID {} does not exist", oid.to_u32()),
        Some("It was dropped, or the OID never named a relation.".into()),
        None,
    )
}

#[track_caller]
pub fn no_privilege_on(table: &str) -> ! {
    raise(
        ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("permission denied for table {table}"),
        Some("snowid_partition_ddl needs a privilege on the table (or owning it).".into()),
        None,
    )
}

#[track_caller]
pub fn not_partitioned_by_bigint(parent: &str) -> ! {
    raise(
        ERRCODE_WRONG_OBJECT_TYPE,
        format!("\"{parent}\" is not partitioned by range of one bigint column"),
        Some("snowid_partition_ddl makes range partitions of a table keyed by snowid.".into()),
        Some(
            "Create it with PARTITION BY RANGE (id), where id is the bigint snowid column.".into(),
        ),
    )
}

#[track_caller]
pub fn partition_name_taken(name: &str, parent: &str) -> ! {
    raise(
        ERRCODE_DUPLICATE_TABLE,
        format!("relation \"{name}\" already exists and is not the partition snowid_partition_ddl would create"),
        Some(format!(
            "It is not a partition of \"{parent}\" with the bounds of that period."
        )),
        Some("Rename or drop it, or partition a table with another name.".into()),
    )
}

// snowid_convert_column.

#[track_caller]
pub fn convert_not_a_table(table: &str) -> ! {
    raise(
        ERRCODE_WRONG_OBJECT_TYPE,
        format!("\"{table}\" is not a table"),
        None,
        None,
    )
}

#[track_caller]
pub fn convert_not_owner(table: &str) -> ! {
    raise(
        ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("must be owner of table {table}"),
        None,
        Some("snowid_convert_column alters the table: run it as its owner or a superuser.".into()),
    )
}

#[track_caller]
pub fn convert_no_column(column: &str, table: &str) -> ! {
    raise(
        ERRCODE_UNDEFINED_COLUMN,
        format!("column \"{column}\" of relation {table} does not exist"),
        None,
        None,
    )
}

/// A key column that is not `bigint`; an `integer` or `smallint` one gets the statement that
/// widens it.
#[track_caller]
pub fn convert_not_bigint(column: &str, table: &str, type_name: &str, widen: Option<&str>) -> ! {
    raise(
        ERRCODE_DATATYPE_MISMATCH,
        format!("column \"{column}\" of {table} is of type {type_name}, not bigint"),
        widen.map(|_| "snowid IDs need 64 bits.".into()),
        widen.map(|statement| {
            format!(
                "Change its type first, which rewrites the table under an ACCESS EXCLUSIVE lock \
                 (and any column that references it): {statement}"
            )
        }),
    )
}

#[track_caller]
pub fn convert_other_default(column: &str, table: &str, default: &str, drop: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("column \"{column}\" of {table} has a default that is not a sequence's: {default}"),
        Some(
            "snowid_convert_column replaces an identity or a sequence default, and leaves other \
             defaults to their owners."
                .into(),
        ),
        Some(format!(
            "If the column should be keyed by snowid, drop the default first: {drop}"
        )),
    )
}

/// A table below the converted one whose values snowid cannot read, so cannot check.
#[track_caller]
pub fn convert_unreadable(column: &str, table: &str, why: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("column \"{column}\" of {table} cannot be checked: {why}"),
        Some(
            "snowid_convert_column reads every value of the column, in the table and every table \
             below it, to make sure new IDs cannot collide with them. Nothing was changed."
                .into(),
        ),
        None,
    )
}

#[track_caller]
pub fn convert_values_above(column: &str, table: &str, highest: i64, shard: i32, first: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "column \"{column}\" of {table} holds values at or above the IDs snowid would issue"
        ),
        Some(format!(
            "Its highest value is {highest}; snowid's next ID for shard {shard} is {first}. New \
             keys could collide with existing ones. Nothing was changed."
        )),
        Some(
            "If those values are snowid IDs issued under another server or epoch, a superuser can \
             move every later ID above them with SELECT snowid_resume_above(<the highest value>); \
             and then convert the column."
                .into(),
        ),
    )
}

#[track_caller]
pub fn trigger_misuse(detail: &str) -> ! {
    raise(
        ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
        "snowid_fill_id must be called as a row-level BEFORE INSERT trigger".into(),
        Some(detail_line(detail)),
        Some(
            "CREATE TRIGGER t BEFORE INSERT ON tbl FOR EACH ROW EXECUTE FUNCTION \
             snowid_fill_id('id', 'user_id');"
                .into(),
        ),
    )
}

#[track_caller]
pub fn trigger_arguments(count: usize) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("snowid_fill_id takes two arguments, not {count}"),
        Some("The first names the bigint ID column, the second the key column.".into()),
        Some(
            "CREATE TRIGGER t BEFORE INSERT ON tbl FOR EACH ROW EXECUTE FUNCTION \
             snowid_fill_id('id', 'user_id');"
                .into(),
        ),
    )
}

#[track_caller]
pub fn trigger_column_missing(column: &str, table: &str) -> ! {
    raise(
        ERRCODE_UNDEFINED_COLUMN,
        format!("column \"{column}\" of relation \"{table}\" does not exist"),
        Some("snowid_fill_id names its ID column and its key column in its arguments.".into()),
        None,
    )
}

#[track_caller]
pub fn trigger_column_type(column: &str, type_name: &str, wanted: &str) -> ! {
    raise(
        ERRCODE_DATATYPE_MISMATCH,
        format!("column \"{column}\" is of type {type_name}, not {wanted}"),
        None,
        None,
    )
}

#[track_caller]
pub fn trigger_null_key(column: &str) -> ! {
    raise(
        ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("cannot derive a snowid shard from a null \"{column}\""),
        Some("snowid_fill_id takes the shard from snowid_shard_for(<key>).".into()),
        Some(format!(
            "Give \"{column}\" a value, or supply the ID yourself."
        )),
    )
}

/// A bad setting at start-up stops the postmaster, with the reason in the log: running on with
/// a default instead would silently re-date IDs (`snowid.epoch`), claim every shard
/// (`snowid.shards`), or change the permitted lead.
#[track_caller]
pub fn invalid_setting_at_startup(name: &str, text: &str, detail: &str, hint: &str) -> ! {
    ErrorReport::new(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{text}\""),
        "snowid",
    )
    .set_detail(detail_line(detail))
    .set_hint(hint)
    .report(PgLogLevel::FATAL);
    unreachable!("a FATAL report does not return")
}

/// The hint of every error about the mask's keys.
pub const MASK_KEY_FILE_HINT: &str =
    "Name a file in snowid.mask_key_file, owned by the server's user with permissions u=rw \
     (0600), holding a line per key such as \"* 1 <32 hexadecimal digits>\" (make a key with \
     `openssl rand -hex 16`), then reload.";

/// A key file that cannot be used at start-up stops the postmaster, as any bad snowid setting
/// does (a reload keeps the last good keys instead). Nothing read from the file is repeated.
#[track_caller]
pub fn invalid_mask_key_file_at_startup(message: &str, detail: Option<&str>) -> ! {
    let mut report = ErrorReport::new(ERRCODE_CONFIG_FILE_ERROR, message.to_string(), "snowid");
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    report
        .set_hint(MASK_KEY_FILE_HINT)
        .report(PgLogLevel::FATAL);
    unreachable!("a FATAL report does not return")
}

/// 0.7.0's `snowid.mask_key` in the configuration stops the postmaster: 0.8.0 reads keys from
/// a file only, and the line would leave a key where every role can read it. The value is not
/// repeated.
#[track_caller]
pub fn removed_mask_key_setting_at_startup() -> ! {
    ErrorReport::new(
        ERRCODE_UNDEFINED_OBJECT,
        "unrecognized configuration parameter \"snowid.mask_key\"",
        "snowid",
    )
    .set_detail(
        "snowid 0.8.0 reads the public IDs' keys from the file snowid.mask_key_file names, \
         never from a setting, which PostgreSQL shows to every role where snowid is not loaded.",
    )
    .set_hint(
        "Move the key into the key file as version 1 of each database that masked with it \
         (a line \"<database> 1 <key>\"), set snowid.mask_key_file, and delete the \
         snowid.mask_key line.",
    )
    .report(PgLogLevel::FATAL);
    unreachable!("a FATAL report does not return")
}

/// A mask function with no key file named. `what` is the function, such as `snowid_mask`.
#[track_caller]
pub fn mask_key_file_not_set(what: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid.mask_key_file is not set".into(),
        Some(format!(
            "{what} masks IDs with the keys in the file snowid.mask_key_file names, and it names \
             none on this server."
        )),
        Some(MASK_KEY_FILE_HINT.into()),
    )
}

/// A mask function in a database the key file gives no key for.
#[track_caller]
pub fn no_mask_key_for_database(what: &str, database: &str) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("the mask key file has no key for database \"{database}\""),
        Some(format!(
            "{what} uses the database's own keys or the default's (*), and the file \
             snowid.mask_key_file names has neither."
        )),
        Some(
            "Add a line for the database, or a default line (*), to the key file, then reload."
                .into(),
        ),
    )
}

/// Two Citus nodes whose public IDs' keys for the database Citus is in differ, as a check of
/// this node found them (see `crate::server::citus`): another node, and each one's fingerprints.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct MaskKeysDiffer {
    pub node: String,
    pub theirs: String,
    pub mine: String,
}

/// A mask function on a Citus node whose keys differ from another node's: one ID would get two
/// public forms, and a form made on one node would read as another ID on the other.
#[track_caller]
pub fn citus_mask_keys_differ(what: &str, this_node: &str, differ: &MaskKeysDiffer) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowid's mask keys differ between Citus nodes {this_node} and {}",
            differ.node
        ),
        Some(format!(
            "{what} refuses while this node's keys for this database (fingerprints {}) differ \
             from {}'s ({}): the same ID would have two public forms, and a form made on one \
             node would read as another ID on the other.",
            differ.mine, differ.node, differ.theirs
        )),
        Some(
            "Give every node (and its standbys) the same lines for this database in the file \
             snowid.mask_key_file names, and reload each; the check compares them again within \
             seconds. snowid_mask_key_fingerprint() shows a node's."
                .into(),
        ),
    )
}

/// A mask function on a server that did not preload snowid: its keys are read only there.
#[track_caller]
pub fn mask_not_preloaded(what: &str) -> ! {
    raise_not_preloaded(format!(
        "{what} reads its keys from the file snowid.mask_key_file names, which the server reads \
         only when it loads snowid at start-up."
    ))
}

/// A key version asked for by number that the database's keys lack.
#[track_caller]
pub fn no_such_mask_key_version(what: &str, version: i32, versions: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("{what}: this database has no mask key of version {version}"),
        Some(format!("Its key versions are {versions}.")),
        None,
    )
}

/// A prefix the text form cannot carry.
#[track_caller]
pub fn invalid_mask_prefix(reason: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        "invalid prefix for a masked snowid".into(),
        Some(detail_line(reason)),
        Some(
            "A prefix has at most 32 ASCII letters, digits and underscores, such as 'ord'.".into(),
        ),
    )
}

/// A negative value given to the mask, which covers 0 to 2^63 - 1. `what` is the function.
#[track_caller]
pub fn negative_mask_input(what: &str, value: i64) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{what} takes a non-negative bigint, not {value}"),
        Some("IDs and masked IDs are from 0 to 9223372036854775807.".into()),
        None,
    )
}

/// A text that is not the text form of a masked ID. The text is quoted when it is short and
/// printable ASCII, which reads the same in every database encoding.
#[track_caller]
pub fn invalid_masked_text(text: &str, reason: &str) -> ! {
    let message = if text.len() <= 40 && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        format!("invalid masked snowid: \"{text}\"")
    } else {
        "invalid masked snowid".to_string()
    };
    raise(
        ERRCODE_INVALID_TEXT_REPRESENTATION,
        message,
        Some(detail_line(reason)),
        Some(
            "A masked snowid in text is what snowid_mask_text writes: 13 symbols of Crockford's \
             base32, after a symbol of the key's version from version 2, after the prefix if one \
             was given."
                .into(),
        ),
    )
}

/// An unknown `snowid.*` setting at start-up stops the postmaster too: it is almost always a
/// misspelt real one, whose intended value would otherwise be silently ignored.
#[track_caller]
pub fn unknown_setting_at_startup(name: &str, suggestion: Option<&str>) -> ! {
    let mut report = ErrorReport::new(
        ERRCODE_UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
        "snowid",
    )
    .set_detail(
        "\"snowid\" is a reserved prefix: a misspelt snowid setting would otherwise be ignored.",
    );
    report = match suggestion {
        Some(real) => report.set_hint(format!("Perhaps you meant \"{real}\".")),
        None => report
            .set_hint("The snowid settings are snowid.epoch, snowid.max_lead, snowid.shards, snowid.promotion_margin and snowid.mask_key_file."),
    };
    report.report(PgLogLevel::FATAL);
    unreachable!("a FATAL report does not return")
}

/// A detail line from a lowercase reason: capitalised, with a full stop.
pub fn detail_line(reason: &str) -> String {
    let mut chars = reason.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect::<String>() + ".",
        None => String::new(),
    }
}
