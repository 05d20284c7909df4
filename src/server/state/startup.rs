//! Start-up, carried out: `snowid_core::startup` plans every case (its table lists them), and
//! this module reads what the plan needs and writes what it says, when a server first needs the
//! state after a (re)start, when `CREATE EXTENSION` or `ALTER EXTENSION ... UPDATE` makes sure
//! it exists, and when `pg_upgrade` brings a database with snowid into the cluster
//! ([`start`]); and what generation would do, without writing, for `snowid_info()` ([`outlook`]).
//!
//! It reads the pages, and, only where they hold no state, the witnesses: the cluster's, the
//! databases', and earlier versions' files. Where the pages hold no state (and whenever
//! `pg_upgrade` brings databases in), the reading, the plan and the write happen under a lock
//! that serialises them across the cluster, so that two databases never both create the state.
//! A state created is written whole in one WAL record and made durable (flushed, and confirmed
//! by the synchronous standbys) before anything uses it or any witness is left. A crash or an
//! error at any point before that leaves the pages as they were and the evidence with them, so
//! the next try plans the same (the fault points of [`super::faults`] test each point).

use super::durability::{make_durable, persist};
use super::{faults, old_files, pages, wal_records, witness};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{Change, DurableState, Unavailable, RELATION_NUMBER};
use snowid_core::startup::{plan, Context, Found, Occasion, Plan, Reading, Status, Write};

/// Start-up for `occasion`: reads, lets `planner` plan, writes what the plan says, durably, and
/// leaves the witnesses that are not there yet. Call in a transaction, on a server that may
/// write WAL (and, for generation, with the writer's claim held).
pub fn start(
    occasion: Occasion,
    planner: &dyn Fn(Reading<'_>) -> Plan,
) -> Result<Plan, Unavailable> {
    // A state there is used as it is, except by pg_upgrade's fence; anything else is written
    // under the creation lock, after a second read: another process may have written the state
    // meanwhile.
    let (found, _lock) = match pages::read() {
        found @ Found::State(_) if occasion != Occasion::PgUpgrade => (found, None),
        _ => {
            let lock = CreationLock::take();
            (pages::read(), Some(lock))
        }
    };
    let plan = planner(Reading {
        found,
        witnessed: &witnessed,
        timeline: wal_records::timeline(),
    });
    match &plan.write {
        Write::Nothing => {}
        Write::State => write_durably(&plan.state)?,
        Write::Change(change) => persist(change, &mut || {})?,
    }
    leave_witnesses(occasion == Occasion::PgUpgrade);
    Ok(plan)
}

/// What generation would find if the state were loaded now, without writing anything: for
/// `snowid_info()` on a server that has not loaded it since it started (on a standby too).
pub fn outlook(context: &Context) -> Status {
    plan(
        Reading {
            found: pages::read(),
            witnessed: &witnessed,
            timeline: 0,
        },
        Occasion::Need,
        context,
    )
    .status
}

/// Whether anything witnesses that the cluster had the state: looked up only for pages found
/// missing.
fn witnessed() -> bool {
    witness::anywhere() || old_files::any_left()
}

/// Writes a whole state in one WAL record and waits until it is durable, then says so in the
/// log.
fn write_durably(state: &DurableState) -> Result<(), Unavailable> {
    let lsn = pages::create(state);
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
