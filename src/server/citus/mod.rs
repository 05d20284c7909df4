//! Citus, first-class: a node of a Citus cluster takes its shards from its Citus group with no
//! configuration, and no configuration makes two nodes issue the same ID.
//!
//! Where Citus is preloaded beside snowid, each node generates only for the shards its last
//! *check* found it may: its claim (its group's block of 32 shards while `snowid.shards` is at
//! its default, or the set `snowid.shards` names; see `snowid_core::citus`) less every shard
//! another node of the cluster claims too. The check (see [`check`]) reads Citus's metadata in
//! the database where the citus extension is, and asks every other primary node for its claim
//! over Citus's own connections. It runs off the hot path, once for the whole server (see
//! [`segment`] for who runs it and how the others wait), before the first ID after:
//! - the server starts;
//! - Citus's record of the nodes or this node's group changes in that database (a node added or
//!   removed, the coordinator set, a node's address updated after a failover: Citus's triggers
//!   on `pg_dist_node` and `pg_dist_local_group` invalidate those tables' relcache entries, which
//!   [`invalidation`] watches in every backend);
//! - `snowid.shards` changes here (a process whose set no longer matches the last check's calls
//!   for a new one from its next slow path, which it takes at once where the new set holds a
//!   shard the last check did not allow, and at least every 10 ms otherwise);
//! - another node's claim changes so that it no longer matches this node's last check (that
//!   node tells this one when it checks, see [`check::answer`]).
//!
//! A check that is due empties the shard set the hot path reads, so every call waits for it in
//! the slow path; nothing on the hot path ever reads Citus's metadata or the network. The hot
//! path reads one flag without Citus, and the shared set's word for the shard with it.

pub mod check;
mod invalidation;
pub mod metadata;
pub mod segment;

use crate::errors::{self, CitusNode};
use crate::server::{settings, shared_memory};
use check::Report;
use pgrx::pg_sys;
use snowid_core::citus::{self as groups, GROUPS, SHARDS_PER_GROUP};
use snowid_core::layout::Shard;
use snowid_core::shard_set::ShardSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Set in the postmaster when Citus is preloaded beside snowid; inherited by every process.
static CITUS: AtomicBool = AtomicBool::new(false);

/// Sets up the check where Citus is preloaded. Call only from `_PG_init` during
/// `shared_preload_libraries` processing, after the settings are defined.
pub fn init() {
    if !citus_preloaded() {
        return;
    }
    CITUS.store(true, Relaxed);
    invalidation::register();
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

/// Whether this server checks its shards against a Citus cluster.
pub fn in_use() -> bool {
    CITUS.load(Relaxed)
}

/// The check's shared memory, where Citus is preloaded.
#[inline(always)]
fn segment() -> Option<&'static segment::Segment> {
    match CITUS.load(Relaxed) {
        true => segment::segment(),
        false => None,
    }
}

/// Whether the last check lets this node generate for `shard`, with no check due: the hot
/// path's test, one load without Citus.
#[inline(always)]
pub fn allows(shard: Shard) -> bool {
    !CITUS.load(Relaxed) || segment::segment().is_some_and(|s| s.allows(shard))
}

/// Runs the check if one is due, or waits for the process running it. A check is due too if
/// `snowid.shards`, as this process has it, differs from the last check's.
pub fn ensure_checked() {
    let Some(segment) = segment() else {
        return;
    };
    let configured = settings::configured_shards();
    if segment.watched().1 != check::fingerprint_of(&configured) && !segment.check_due() {
        segment.want_check(false);
    }
    // A parallel worker cannot ask other nodes (a leader in parallel mode, as Citus runs the
    // queries whose rows an INSERT ... SELECT repartitions, can): it checks only where their
    // last answers still stand.
    // SAFETY: a plain read of this process's number among a parallel query's workers.
    let may_ask = unsafe { pg_sys::ParallelWorkerNumber } < 0;
    while segment.check_due() {
        match segment.become_checker(shared_memory::claimer()) {
            Some(_checker) => check::run(segment, &configured, may_ask),
            None => segment.wait_for_check(),
        }
        pgrx::check_for_interrupts!();
    }
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

fn last_report() -> Option<Report> {
    segment()?.report().as_deref().and_then(Report::decode)
}

/// Shards no node claims now, as whole groups' blocks, for the hints.
fn unclaimed(report: &Report) -> ShardSet {
    let nodes = std::iter::once(&report.node).chain(&report.peers);
    let claims: Vec<ShardSet> = nodes
        .clone()
        .map(|n| ShardSet::parse(&n.claim).unwrap_or_else(|_| ShardSet::empty()))
        .collect();
    groups::free_blocks(nodes.map(|n| n.group), &claims)
}

/// The first group's block that no node claims now.
fn first_unclaimed_block(report: &Report) -> ShardSet {
    unclaimed(report)
        .iter()
        .next()
        .and_then(|shard| groups::block((shard / SHARDS_PER_GROUP) as i32))
        .unwrap_or_else(ShardSet::empty)
}

/// Raises the error for a shard this node may not generate for (after a check).
pub fn refuse_shard(shard: Shard) -> ! {
    let Some(report) = last_report() else {
        errors::shard_not_owned(shard.get(), "")
    };
    let this = report.node.describe();
    match report.sharer_of(shard.index()) {
        Some(other) => {
            let shared = ShardSet::parse(&other.shared).unwrap_or_else(|_| ShardSet::empty());
            errors::citus_shard_shared(
                shard.get(),
                &this,
                &other.describe(),
                &shared.to_string(),
                &unclaimed(&report).to_string(),
            )
        }
        None => errors::citus_shard_not_this_nodes(shard.get(), &this),
    }
}

/// Raises the error for `snowid_next()` on a node left with no shard to generate for, or
/// returns where the reason is not Citus's (`snowid.shards` names none).
pub fn refuse_all() {
    let Some(report) = last_report() else {
        return;
    };
    if report.claim().is_empty() && report.node.by_hand == Some(true) {
        return;
    }
    let sharers: Vec<(CitusNode, String)> = report
        .peers
        .iter()
        .filter(|p| !p.shared.is_empty())
        .map(|p| (p.describe(), p.shared.clone()))
        .collect();
    let suggested = match sharers.is_empty() {
        true => first_unclaimed_block(&report),
        false => unclaimed(&report),
    };
    errors::citus_no_shard(
        &report.node.describe(),
        &sharers,
        (GROUPS, SHARDS_PER_GROUP),
        &suggested.to_string(),
    )
}

/// This node's answer to another node's check (see [`check::answer`]).
pub fn answer(asker_group: i32, asker_claim: &ShardSet) -> String {
    check::answer(
        segment(),
        &settings::configured_shards(),
        asker_group,
        asker_claim,
    )
}

/// The last check's report, after any due check (none on a standby, which generates nothing and
/// cannot take the check's locks): for `snowid_citus_nodes()`.
pub fn report() -> Option<Report> {
    // SAFETY: a plain call.
    if !unsafe { pg_sys::RecoveryInProgress() } {
        ensure_checked();
    }
    last_report()
}
