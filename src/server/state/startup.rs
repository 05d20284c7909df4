//! The one owner of start-up: it carries out the decision `snowid_core::startup` makes about
//! what snowid's durable state is (every case is listed there), when a server first needs the
//! state after a (re)start, when `CREATE EXTENSION` or `ALTER EXTENSION ... UPDATE` makes sure
//! it exists, when `snowid_info()` reports what generation would do, and when `pg_upgrade`
//! brings a database with snowid into the cluster.
//!
//! This module gathers what the decision needs (the pages, and, only where they are missing,
//! the witnesses: the cluster's, the databases', and earlier versions' files) and writes what it
//! says: every state it creates, fresh or fenced, is written whole in one WAL record and made
//! durable (flushed, and confirmed by the synchronous standbys) before anything uses it or any
//! witness is left, under a lock that serialises every creation in the cluster. A crash or an
//! error at any point before that leaves the pages missing and the evidence as it was, so the
//! next try decides the same (the fault points of [`super::faults`] test each point).

use super::durability::make_durable;
use super::{faults, old_files, pages, wal_records, witness};
use crate::errors;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{Change, DurableState, Unavailable, RELATION_NUMBER};
use snowid_core::generator::Status;
use snowid_core::startup::{decide, fence_for_upgrade, Found, Occasion, StartUp};

/// The state for generation, created first if the decision says so, and the witnesses left.
/// Call with the writer's claim held, in a transaction, on a server that may write WAL.
pub fn load(epoch_unix_ms: i64) -> Result<DurableState, Unavailable> {
    let state = match pages::read() {
        Found::State(state) => *state,
        _ => settle(Occasion::Need, epoch_unix_ms)?,
    };
    leave_witnesses(false);
    Ok(state)
}

/// Makes sure the state exists, for `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE`, and
/// leaves the witnesses.
pub fn ensure(epoch_unix_ms: i64) -> Result<(), Unavailable> {
    if !matches!(pages::read(), Found::State(_)) {
        settle(Occasion::Install, epoch_unix_ms)?;
    }
    leave_witnesses(false);
    Ok(())
}

/// What generation would do if the state were loaded now, without creating anything: for
/// `snowid_info()` on a server that has not loaded it since it started.
pub fn outlook(epoch_unix_ms: i64) -> Status {
    let state = match decide(pages::read(), witnessed, Occasion::Need, epoch_unix_ms) {
        StartUp::Loaded(state) | StartUp::Create(state) => state,
    };
    Status::of(&state.header, epoch_unix_ms)
}

/// The lease end the pages record, without loading them: for `snowid_info()`.
pub fn recorded_lease_end() -> Option<i64> {
    match pages::read() {
        Found::State(s) if s.header.lease_end_unix_ms > s.header.epoch_unix_ms => {
            Some(s.header.lease_end_unix_ms)
        }
        _ => None,
    }
}

/// Fences the state because `pg_upgrade` is bringing a database with snowid into this cluster
/// (see `snowid_core::startup::fence_for_upgrade`): durably, in binary-upgrade mode, before the
/// upgraded cluster ever starts normally. Leaves the cluster's witness, not a database's: the
/// databases' directories are about to receive the old cluster's files.
pub fn fence_for_pg_upgrade(epoch_unix_ms: i64) {
    let _lock = CreationLock::take();
    // The databases coming in bring their records of the releases; what this cluster's witness
    // listed (after a trial of the new cluster, say) is not theirs. Forgotten first: a crash
    // before the fence leaves nothing listed.
    witness::forget_released();
    let Some(state) = fence_for_upgrade(pages::read(), epoch_unix_ms) else {
        return;
    };
    if let Err(unavailable) = write_durably(state) {
        errors::state_unavailable(&unavailable);
    }
    leave_witnesses(true);
}

/// Whether anything witnesses that the cluster had the state: looked up only for pages found
/// missing.
fn witnessed() -> bool {
    witness::anywhere() || old_files::any_left()
}

/// Decides under the creation lock, and writes the state durably if the decision says so.
fn settle(occasion: Occasion, epoch_unix_ms: i64) -> Result<DurableState, Unavailable> {
    let _lock = CreationLock::take();
    match decide(pages::read(), witnessed, occasion, epoch_unix_ms) {
        StartUp::Loaded(state) => Ok(*state),
        StartUp::Create(state) => {
            let mut state = *state;
            state.header.timeline = wal_records::timeline();
            write_durably(state.clone())?;
            Ok(state)
        }
    }
}

/// Writes a whole state in one WAL record and waits until it is durable, then says so in the
/// log.
fn write_durably(state: DurableState) -> Result<(), Unavailable> {
    let lsn = pages::create(&state);
    faults::at(faults::Point::Logged);
    make_durable(lsn).map_err(|_| {
        Unavailable::NotReplicated(Box::new(Change::Init(Box::new(state.header.clone()))))
    })?;
    faults::at(faults::Point::Durable);
    match state.header.fence {
        None => log!("snowid created its state in \"global/{RELATION_NUMBER}\""),
        Some(fence) => log!(
            "snowid wrote its state in \"global/{RELATION_NUMBER}\" fenced: {}; no ID is issued until a superuser resumes above the IDs already issued",
            fence.describe()
        ),
    }
    Ok(())
}

/// Leaves the witnesses that are not there yet; the state is durable.
fn leave_witnesses(cluster_only: bool) {
    if let Some(lsn) = witness::leave(cluster_only) {
        // A witness only adds evidence: a wait for the standbys cancelled here loses nothing
        // that the next load would not write again.
        let _ = make_durable(lsn);
    }
}

/// The cluster-wide lock every creation of the state takes, so that two databases never both
/// find it missing and create it: a lock on a shared object named after the state's relation,
/// released as soon as the creation is durable.
struct CreationLock;

impl CreationLock {
    fn take() -> CreationLock {
        // SAFETY: a plain heavyweight lock request in a transaction; it waits interruptibly.
        unsafe {
            pg_sys::LockSharedObject(
                pg_sys::RelationRelationId,
                pg_sys::Oid::from(RELATION_NUMBER),
                0,
                pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE,
            )
        };
        CreationLock
    }
}

impl Drop for CreationLock {
    fn drop(&mut self) {
        // SAFETY: releases the lock `take` acquired (an error's abort would release it too).
        unsafe {
            pg_sys::UnlockSharedObject(
                pg_sys::RelationRelationId,
                pg_sys::Oid::from(RELATION_NUMBER),
                0,
                pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE,
            )
        };
    }
}
