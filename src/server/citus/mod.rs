//! Citus, first-class: a node of a Citus cluster takes its shards from its Citus group with no
//! configuration, and no configuration makes two nodes issue the same ID.
//!
//! Where Citus is preloaded beside snowid, each node generates only for the shards its last
//! *check* found it may: its claim (its group's block of 32 shards while `snowid.shards` is at
//! its default, or the set `snowid.shards` names; see `snowid_core::citus`) less every shard
//! another node of the cluster may generate for too. One background worker per server, the
//! [`checker`], makes every check, in the one database `snowid.citus_database` names: it reads
//! Citus's metadata there and asks every other primary node for its claim over Citus's own
//! connections (see [`check`]); other nodes ask this one the same way (see [`answer`]). A check
//! is made off the hot path:
//! - before the first ID after the server starts;
//! - before the next ID after Citus's record of the nodes or this node's group changes in that
//!   database (a node added or removed, the coordinator set, a node's address updated after a
//!   failover, metadata sync stopped or started: Citus's triggers on `pg_dist_node` and
//!   `pg_dist_local_group` invalidate those tables' relcache entries, which [`invalidation`]
//!   watches in every backend);
//! - before the next ID after a reload that changes `snowid.shards`, which the checker sees as
//!   it happens;
//! - before the next ID after another node tells of a claim this node's last check does not
//!   match (see [`answer`]);
//! - while generation goes on, when a backend is about to refuse a shard and the last check is
//!   more than a second old, and every few seconds while some node could not be heard from or
//!   some shard is refused (see [`checker`]), until they are heard and the overlap is gone.
//!
//! A check that is due empties the shard set the hot path reads, so every call waits for it in
//! the slow path; nothing on the hot path ever reads Citus's metadata or the network. The hot
//! path reads one flag without Citus, and the shared set's word for the shard with it.

pub mod answer;
mod check;
mod checker;
mod invalidation;
mod message;
mod metadata;
mod presence;
mod report;
pub mod segment;

use crate::errors::{self, CitusNode, CitusSharer, CitusSpare, MaskKeysDiffer};
use crate::server::settings;
pub use check::OwnIds;
use pgrx::pg_sys;
pub use report::Report;
use snowid_core::citus::{self as groups, GROUPS, SHARDS_PER_GROUP};
use snowid_core::host::Clock;
use snowid_core::layout::Shard;
use snowid_core::shard_set::ShardSet;
use std::time::{Duration, Instant};

/// How old the last check may be before a refusal asks every node again.
const ASK_AGAIN_AFTER_MS: i64 = 1000;

/// How long a backend waits for a checker that could not connect to its database to connect.
const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// How long a backend whose `snowid.shards` differs from the last check's waits for the checker
/// to check its own, before it refuses.
const RELOAD_WAIT: Duration = Duration::from_secs(1);

/// Defines the answer's setting, and where Citus is preloaded, registers the checker and the
/// invalidation callback. Call only from `_PG_init` during `shared_preload_libraries`
/// processing, after the settings are defined. `own` reads this server's own IDs (the
/// generator's shards are not this module's to read).
pub fn init(own: OwnIds) {
    answer::define();
    let citus = citus_preloaded();
    presence::set(own, citus);
    if !citus {
        return;
    }
    invalidation::register();
    checker::register();
}

/// Whether `shared_preload_libraries` names Citus (which must come before snowid, and refuses to
/// load otherwise).
fn citus_preloaded() -> bool {
    // SAFETY: GetConfigOption returns null or a NUL-terminated string owned by the GUC system.
    let libraries = unsafe {
        let raw = pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false);
        match raw.is_null() {
            true => return false,
            false => std::ffi::CStr::from_ptr(raw).to_string_lossy().into_owned(),
        }
    };
    libraries.split(',').any(|item| {
        let item = item.trim().trim_matches('"');
        item.rsplit('/').next() == Some("citus")
    })
}

pub use presence::in_use;

/// The check's shared memory, where Citus is preloaded.
#[inline(always)]
fn segment() -> Option<&'static segment::Segment> {
    match in_use() {
        true => segment::segment(),
        false => None,
    }
}

/// Whether the last check lets this node generate for `shard`, with no check due: the hot
/// path's test, one load without Citus.
#[inline(always)]
pub fn allows(shard: Shard) -> bool {
    !in_use() || segment::segment().is_some_and(|s| s.allows(shard))
}

/// Waits for a due check (the checker makes it). A cancel or `statement_timeout` ends the wait,
/// and so does a checker that is not running.
pub fn ensure_checked() {
    if let Some(segment) = segment() {
        wait_for(segment, None, || !segment.check_due());
    }
}

/// Waits until `done`, or `limit` has passed (returning false), while the checker runs.
fn wait_for(
    segment: &segment::Segment,
    limit: Option<Duration>,
    mut done: impl FnMut() -> bool,
) -> bool {
    let began = Instant::now();
    while !done() {
        if limit.is_some_and(|limit| began.elapsed() >= limit) {
            return false;
        }
        let now = snowid_core::clock::SystemClock.wall_ms();
        let absent = segment.checker_pid() == 0;
        if absent && began.elapsed() > checker::RESTART * 4
            || segment.checker_could_not_connect(now, CONNECT_WAIT.as_millis() as i64)
        {
            errors::citus_checker_not_running(&settings::citus_database());
        }
        segment.wait_for_check();
        pgrx::check_for_interrupts!();
    }
    true
}

/// The shards this node may generate for, after any due check; every shard without Citus.
pub fn generating() -> ShardSet {
    match segment() {
        Some(segment) => {
            ensure_checked();
            segment.generating()
        }
        None => ShardSet::all(),
    }
}

/// Before a refusal: if the last check used another `snowid.shards` than this process has (a
/// reload the checker has not made yet, or one this process has not), waits a little for the
/// checker to check this one; else, if the last check failed (the citus extension not created
/// yet, say), or is more than a second old, asks every node again and waits for the answer.
/// Returns whether a newer check is in force.
pub fn ask_again() -> bool {
    let Some(segment) = segment() else {
        return false;
    };
    let Some(last) = segment.report() else {
        return false;
    };
    let mine = report::fingerprint_of(&settings::configured_shards());
    if last.fingerprint != mine && last.failure.is_none() {
        return wait_for(segment, Some(RELOAD_WAIT), || {
            !segment.check_due() && segment.report().is_some_and(|r| r.fingerprint == mine)
        });
    }
    let age = snowid_core::clock::SystemClock.wall_ms() - last.at_unix_ms;
    if last.failure.is_none() && age < ASK_AGAIN_AFTER_MS && !passed_issued_ids(&last) {
        return false;
    }
    let seen = segment.want_asking();
    wait_for(segment, None, || {
        segment.published() > seen && !segment.check_due()
    })
}

/// Whether the last check refuses a shard for IDs another node issued outside its claim that
/// this node's next IDs for it are above now (after a resume, say).
fn passed_issued_ids(report: &Report) -> bool {
    let above = presence::own_ids().above;
    report.peers.iter().any(|peer| {
        let Some((shards, last_id)) = &peer.issued else {
            return false;
        };
        let issued = ShardSet::parse(shards).unwrap_or_else(|_| ShardSet::empty());
        let refused_for_them = peer
            .shared()
            .intersection(&issued)
            .difference(&peer.claim());
        let passed = refused_for_them.iter().any(|s| above(s, *last_id));
        passed
    })
}

fn last_report() -> Option<Report> {
    segment()?.report()
}

/// Shards no Citus group has been given and no node claims, as whole blocks, for the hints; and
/// those of groups given to nodes removed since.
fn spare(report: &Report) -> CitusSpare {
    let nodes = std::iter::once(&report.node).chain(&report.peers);
    let groups: Vec<i32> = nodes
        .clone()
        .flat_map(|n| n.group.into_iter().chain(n.own_group))
        .collect();
    let claims: Vec<ShardSet> = nodes.map(|n| n.claim()).collect();
    let free = groups::free_blocks(report.given, groups.iter().copied(), &claims);
    let removed = groups::removed_blocks(report.given, groups.iter().copied(), &claims);
    let first = groups::first_block(&removed);
    let removed_range = first.iter().next().zip(first.iter().last());
    CitusSpare {
        free: groups::first_block(&free).to_string(),
        removed: removed.to_string(),
        removed_range,
    }
}

/// Raises the error for a shard this node may not generate for (after a check).
pub fn refuse_shard(shard: Shard) -> ! {
    let Some(report) = last_report() else {
        errors::shard_not_owned(shard.get(), "")
    };
    refuse_if_failed(&report);
    let this = this_node(&report);
    match report.sharer_of(shard.index()) {
        Some(other) if unheard(other).contains(shard.index()) => {
            errors::citus_shard_unheard(shard.get(), &this, &other.describe())
        }
        Some(other) if !other.claim().contains(shard.index()) => {
            let last_id = other.issued.as_ref().map_or(0, |(_, last)| *last);
            errors::citus_shard_issued_elsewhere(shard.get(), &this, &other.describe(), last_id)
        }
        Some(other) => errors::citus_shard_shared(
            shard.get(),
            &this,
            &other.describe(),
            &other.shared,
            &spare(&report).free,
        ),
        None => errors::citus_shard_not_this_nodes(shard.get(), &this),
    }
}

/// The shards a node keeps this one from because it has not heard this node claim them: those it
/// shares that it neither claims nor issued IDs for.
fn unheard(peer: &report::NodeReport) -> ShardSet {
    let issued = peer
        .issued
        .as_ref()
        .and_then(|(shards, _)| ShardSet::parse(shards).ok())
        .unwrap_or_else(ShardSet::empty);
    peer.shared().difference(&peer.claim()).difference(&issued)
}

/// This node, as the errors name it (the IDs it issued outside its claim are for the others).
fn this_node(report: &Report) -> CitusNode {
    CitusNode {
        issued: None,
        ..report.node.describe()
    }
}

/// Raises the error of a check that could not be made, if the last one could not.
fn refuse_if_failed(report: &Report) {
    if let Some(why) = &report.failure {
        errors::citus_check_failed(&report.database, why);
    }
}

/// Raises the error for `snowid_next()` on a node left with no shard to generate for, or
/// returns where the reason is not Citus's (`snowid.shards` names none, or this process's copy
/// of it is older than the last check's). `released` are the shards released here.
pub fn refuse_all(released: &ShardSet) {
    let Some(report) = last_report() else {
        return;
    };
    refuse_if_failed(&report);
    let this = this_node(&report);
    let claim = report.claim();
    if claim.is_empty() && report.node.by_hand == Some(true) {
        return;
    }
    if claim.is_empty() {
        errors::citus_past_capacity(&this, (GROUPS, SHARDS_PER_GROUP), &spare(&report));
    }
    let sharers: Vec<CitusSharer> = report
        .peers
        .iter()
        .filter(|p| !p.shared.is_empty())
        .map(|p| CitusSharer {
            node: p.describe(),
            shared: p.shared.clone(),
            unheard: unheard(p).to_string(),
        })
        .collect();
    if !sharers.is_empty() {
        errors::citus_no_shard(&this, &sharers, &spare(&report).free)
    }
    if claim.is_subset(released) {
        errors::citus_all_released(&this);
    }
}

/// Where the last check found another node whose public IDs' keys for this database differ
/// from this node's: this node's name, and that node with both fingerprints. `None` in every
/// other database than the one the check reads (the only one Citus distributes tables in). One
/// load while the keys agree.
pub fn mask_keys_differ() -> Option<(String, MaskKeysDiffer)> {
    let segment = segment().filter(|s| s.mask_keys_differ())?;
    let report = segment.report()?;
    let differ = report.mask_keys_differ?;
    (report.database == check::database_name()).then_some((report.node.about.name, differ))
}

/// The last check's report, after any due check (none on a standby, which generates nothing):
/// for `snowid_citus_nodes()`. A check that could not be made raises its error.
pub fn report() -> Option<Report> {
    // SAFETY: a plain call.
    if !unsafe { pg_sys::RecoveryInProgress() } {
        ensure_checked();
        if last_report().is_some_and(|r| r.failure.is_some()) {
            ask_again();
        }
    }
    let report = last_report()?;
    refuse_if_failed(&report);
    Some(report)
}
