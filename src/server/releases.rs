//! The changes of the cluster's released shards, each carried out once, as
//! `snowid_core::release_plan` plans it: a release, a take-back and a fence lift, in the durable
//! state, the cluster's witness (`global/9129`) and every database's record
//! (`snowid_released_shards`), under the [`ClusterLock`]; and an install's record, written at its
//! commit.
//!
//! The walk from `snowid_release(7)` (see CONTRIBUTING.md's layout section): `sql::operations`
//! checks the argument; [`release`] takes the cluster-wide lock and hands the plan to the core
//! (`Generator::carry_out_release`), which stops the shard in shared memory, takes the list of
//! released shards from there, and has [`EveryDatabase`] write it, the witness first, then each
//! database's record by a background worker (`databases::worker`, `databases::record_table`),
//! then makes the release durable (`state::pages`, one WAL record); a failure comes back to
//! [`raise`], the one place that raises, having been undone as the plan says.
//!
//! [`EveryDatabase`] is the one place that writes the records. It keeps, at every step, what the
//! plan in flight would undo, for the two endings that do not come back to the core: an error
//! that unwinds through it (a cancel while the release waits for the writer's claim, say), undone
//! by [`Unwinding`]'s drop; and a FATAL error (`pg_terminate_backend`), after which the process
//! runs only its exit callbacks: [`at_exit`] undoes it and says so in the server log.

use crate::errors;
use crate::server::cluster_lock::ClusterLock;
use crate::server::databases::{self, failure::Failure, record_table};
use crate::server::issuing::{generator, raise_refusal};
use crate::server::pg_host::PgHost;
use crate::server::shared_memory;
use crate::server::state::{pages, witness};
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use snowid_core::durable::Unavailable;
use snowid_core::generator::{Generator, Shared};
use snowid_core::layout::{Parts, Shard};
use snowid_core::release_plan::{Ending, Failed, InFlight, Plan, Records};
use snowid_core::release_records::Released;
use snowid_core::startup::Found;
use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;

/// Releases a shard on this server: no statement here issues another ID for it from the
/// moment this is called, and once it returns no server that replays this one's WAL does, nor
/// this one after its state is lost or `pg_upgrade`. Returns its last ID.
pub fn release(state: &'static Shared, shard: Shard) -> i64 {
    let _lock = ClusterLock::for_a_change("snowid_release()");
    carry_out(state, Plan::Release, shard, |g, records| {
        g.carry_out_release(shard, records)
    })
}

/// Takes back a shard released here, above an ID of it its other owner issued. Returns the time
/// base's new floor.
pub fn take_back(state: &'static Shared, shard: Shard, above: Parts) -> i64 {
    let _lock = ClusterLock::for_a_change("snowid_take_back()");
    carry_out(state, Plan::TakeBack, shard, |g, records| {
        g.carry_out_take_back(above, records)
    })
}

/// Lifts a fence: releases again, durably, each of `released` (a shard with its last ID), then
/// resumes above `above`, then writes what the state holds into every record. Call with the
/// [`ClusterLock`] held, taken before the databases were read. Returns the time base's new
/// floor.
pub fn lift_fence(state: &'static Shared, above: Parts, released: &[(Shard, i64)]) -> i64 {
    let shard = Shard::new(above.shard).unwrap_or_else(|| errors::shard_out_of_range(above.shard));
    carry_out(state, Plan::FenceLift, shard, |g, records| {
        g.carry_out_fence_lift(above, released, records)
    })
}

/// Carries a plan out (`change`, one of the core's `carry_out_*`) with every database's records,
/// and raises what a failure came to.
fn carry_out(
    state: &'static Shared,
    plan: Plan,
    shard: Shard,
    change: impl FnOnce(
        &Generator<'_, PgHost>,
        &mut EveryDatabase,
    ) -> Result<i64, Failed<Unrecorded, Unavailable>>,
) -> i64 {
    let mut records = EveryDatabase::new(state);
    let _unwinding = Unwinding(state);
    change(&generator(state), &mut records)
        .unwrap_or_else(|failed| raise(plan, shard, failed, &records.written_and_left()))
}

/// Why the witness or a record was not written.
pub enum Unrecorded {
    /// A database could not write its record.
    Database(Box<(String, Failure)>),
    /// An error of this process (a cancel, most often) ended the writing.
    Interrupted { code: String, message: String },
}

/// The databases whose record holds what a change wrote, and those still listing it after a
/// write back.
#[derive(Default)]
struct WrittenAndLeft {
    written: Vec<String>,
    left: Vec<String>,
}

/// The one place that raises what a change came to (see the plan's table for what was undone).
fn raise(
    plan: Plan,
    shard: Shard,
    failed: Failed<Unrecorded, Unavailable>,
    records: &WrittenAndLeft,
) -> ! {
    let unrecorded = match failed {
        Failed::Refused { refused, .. } => raise_refusal(refused, shard),
        Failed::Unrecorded { failure, .. } => failure,
    };
    let (database, code, why) = match &unrecorded {
        Unrecorded::Database(why) => (Some(why.0.as_str()), &why.1.code, why.1.describe()),
        Unrecorded::Interrupted { code, message } => (None, code, message.clone()),
    };
    let n = shard.get();
    match (plan, database) {
        (Plan::Release, None) => errors::release_interrupted(n, code, &why, &records.written),
        (Plan::Release, Some(database)) => {
            errors::release_not_recordable(n, database, code, &why, &records.left)
        }
        (Plan::TakeBack, database) => {
            errors::take_back_not_recorded(n, database, code, &why, &records.written)
        }
        (Plan::FenceLift, database) => {
            errors::fence_lift_not_recorded(database, code, &why, &records.written)
        }
        (Plan::Install, _) => errors::install_not_recorded(code, &why),
    }
}

/// A plan under way in this backend: what [`at_exit`] and [`Unwinding`] undo, and say.
struct Tracked {
    state: &'static Shared,
    in_flight: InFlight,
    written: Vec<String>,
    writing: Option<String>,
}

thread_local! {
    static TRACKED: RefCell<Option<Tracked>> = const { RefCell::new(None) };
    static EXIT_CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// The witness and every database's record, where the plans write them.
struct EveryDatabase {
    state: &'static Shared,
    /// The databases whose record holds what was last written.
    written: Vec<String>,
    /// After a write back, those still listing what the failed change wrote.
    still_listing: Vec<String>,
}

impl EveryDatabase {
    fn written_and_left(&self) -> WrittenAndLeft {
        WrittenAndLeft {
            written: self.written.clone(),
            left: self.still_listing.clone(),
        }
    }

    fn new(state: &'static Shared) -> EveryDatabase {
        if !EXIT_CALLBACK_REGISTERED.with(|flag| flag.replace(true)) {
            // SAFETY: a callback for this process's exit, with no argument; it runs before
            // shared memory is detached.
            unsafe { pg_sys::before_shmem_exit(Some(at_exit), pg_sys::Datum::from(0)) };
        }
        EveryDatabase {
            state,
            written: Vec::new(),
            still_listing: Vec::new(),
        }
    }
}

impl Records for EveryDatabase {
    type Failure = Unrecorded;

    fn ending(failure: &Unrecorded) -> Ending {
        match failure {
            Unrecorded::Database(_) => Ending::Error,
            Unrecorded::Interrupted { .. } => Ending::Cancel,
        }
    }

    fn entering(&mut self, in_flight: Option<InFlight>) {
        let state = self.state;
        TRACKED.with(|tracked| {
            tracked.replace(in_flight.map(|in_flight| Tracked {
                state,
                in_flight,
                written: Vec::new(),
                writing: None,
            }))
        });
    }

    fn write_witness(&mut self, released: &Released) -> Result<(), Unrecorded> {
        witness::record_released(&released.shard_set());
        Ok(())
    }

    fn write_records(&mut self, released: &Released) -> Result<(), Unrecorded> {
        let pairs = released.pairs();
        let written = RefCell::new(Vec::new());
        let mut before = |written: &[String], next: &str| {
            TRACKED.with(|tracked| {
                if let Some(tracked) = tracked.borrow_mut().as_mut() {
                    tracked.written = written.to_vec();
                    tracked.writing = Some(next.to_string());
                }
            })
        };
        let outcome = PgTryBuilder::new(AssertUnwindSafe(|| {
            databases::write_every_record(&pairs, &mut written.borrow_mut(), &mut before)
                .map_err(|why| Unrecorded::Database(Box::new(why)))
        }))
        .catch_others(|caught| match caught {
            CaughtError::PostgresError(e)
            | CaughtError::ErrorReport(e)
            | CaughtError::RustPanic { ereport: e, .. } => Err(Unrecorded::Interrupted {
                code: errors::sqlstate(e.sql_error_code()),
                message: e.message().to_string(),
            }),
        })
        .execute();
        self.written = written.into_inner();
        outcome
    }

    fn write_back(&mut self, released: &Released) {
        witness::record_released(&released.shard_set());
        let mut back = Vec::new();
        let _ = databases::write_records_of(&self.written, &released.pairs(), &mut back);
        self.still_listing = self
            .written
            .iter()
            .filter(|d| !back.contains(d))
            .cloned()
            .collect();
    }
}

/// Undoes, while an error unwinds through a change (a cancel where the core waits, say), what
/// the plan in flight says.
struct Unwinding(&'static Shared);

impl Drop for Unwinding {
    fn drop(&mut self) {
        if let Some(tracked) = TRACKED.with(|tracked| tracked.replace(None)) {
            if std::thread::panicking() {
                generator(self.0).undo(&tracked.in_flight, Ending::Cancel);
            }
        }
    }
}

/// On a FATAL error (or any exit) with a change under way: undoes what the plan in flight says
/// (a release not yet durable issues again), so that memory agrees with the state and the WAL,
/// and says in the server log what holds and which records already list it.
#[pg_guard]
unsafe extern "C-unwind" fn at_exit(_code: std::ffi::c_int, _argument: pg_sys::Datum) {
    let Some(tracked) = TRACKED.with(|tracked| tracked.replace(None)) else {
        return;
    };
    let undone = generator(tracked.state).undo(&tracked.in_flight, Ending::Fatal);
    let mut written = tracked.written;
    written.extend(tracked.writing.map(|d| format!("{d} (being written)")));
    let records = match written.is_empty() {
        true => "no database's record was written yet".to_string(),
        false => format!(
            "the records of {} may list what it wrote until the next release, take-back or \
             fence lift writes them",
            written.join(", ")
        ),
    };
    match (tracked.in_flight.stopped, undone.memory) {
        (Some(stopped), true) => log!(
            "snowid shard {} was not released: the process releasing it ended before the \
             release was durable, so the shard issues IDs on this server again; {records}",
            stopped.shard.get()
        ),
        _ => log!(
            "snowid's {} ended before it was recorded everywhere: it is durable and holds; \
             {records}",
            match tracked.in_flight.plan {
                Plan::Release => "release",
                Plan::TakeBack => "take-back",
                Plan::FenceLift => "fence lift",
                Plan::Install => "install's record",
            }
        ),
    }
}

thread_local! {
    /// Whether this backend's transaction installed or updated snowid in its database, which
    /// then writes its record at commit.
    static RECORD_AT_COMMIT: Cell<bool> = const { Cell::new(false) };
    /// Whether this backend has registered its transaction callback.
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Has this transaction write its database's record at commit, under the [`ClusterLock`]: for
/// `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE`.
pub fn record_at_commit() {
    RECORD_AT_COMMIT.with(|flag| flag.set(true));
    if !CALLBACK_REGISTERED.with(|flag| flag.replace(true)) {
        // SAFETY: a callback for every later transaction of this backend, with no argument.
        unsafe { pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut()) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _argument: *mut std::ffi::c_void,
) {
    if !RECORD_AT_COMMIT.with(|flag| flag.get()) {
        return;
    }
    match event {
        pg_sys::XactEvent::XACT_EVENT_PRE_COMMIT => write_own_record(),
        pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE => errors::prepare_after_install(),
        pg_sys::XactEvent::XACT_EVENT_COMMIT
        | pg_sys::XactEvent::XACT_EVENT_ABORT
        | pg_sys::XactEvent::XACT_EVENT_PREPARE => RECORD_AT_COMMIT.with(|flag| flag.set(false)),
        _ => {}
    }
}

/// This database's record and the witness, written by an install at its commit.
struct OwnRecord;

impl Records for OwnRecord {
    type Failure = Unrecorded;

    fn ending(_: &Unrecorded) -> Ending {
        Ending::Error
    }

    fn entering(&mut self, _: Option<InFlight>) {}

    fn write_witness(&mut self, released: &Released) -> Result<(), Unrecorded> {
        witness::record_released(&released.shard_set());
        Ok(())
    }

    /// As the superuser that owns the record (this transaction's user may be a database owner
    /// who installed the trusted extension). A table that is not snowid's own is not written:
    /// its database then knows nothing of the releases, which a fence lift says.
    fn write_records(&mut self, released: &Released) -> Result<(), Unrecorded> {
        let (mut user, mut context) = (pg_sys::InvalidOid, 0);
        // SAFETY: as the extension's script ran, as the bootstrap superuser, for a write of
        // snowid's own table (with no trigger or rule, checked by `write_here`); restored below.
        // At commit no portal holds a snapshot: SPI gets one of its own, popped below.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
            pg_sys::SetUserIdAndSecContext(
                pg_sys::BOOTSTRAP_SUPERUSERID.into(),
                context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
            );
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let written = record_table::write_here(&released.pairs());
        // SAFETY: back to the snapshot and the identity found above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::SetUserIdAndSecContext(user, context);
        }
        written
            .map(|_| ())
            .map_err(|failure| Unrecorded::Database(Box::new((String::new(), failure))))
    }

    fn write_back(&mut self, _: &Released) {}
}

/// Writes this database's record and the witness, by the install's plan, holding the
/// [`ClusterLock`] until the commit is done. A fenced state knows no release: the record stays
/// empty, which says so.
fn write_own_record() {
    let _lock = ClusterLock::take(pg_sys::ExclusiveLock, true, "the commit of this install");
    let failed = match shared_memory::state() {
        Some(state) => generator(state).carry_out_install(&mut OwnRecord).err(),
        // Without preloading there is no shared memory to take the list from: the durable
        // state's pages give it.
        None => of_state().and_then(|released| {
            let mut own = OwnRecord;
            own.write_witness(&released)
                .and_then(|_| own.write_records(&released))
                .err()
                .map(|failure| Failed::Unrecorded {
                    step: snowid_core::release_plan::Step::Records,
                    failure,
                    undone: Default::default(),
                })
        }),
    };
    if let Some(failed) = failed {
        let any = Shard::new(0).unwrap_or_else(|| errors::shard_out_of_range(0));
        raise(Plan::Install, any, failed, &WrittenAndLeft::default());
    }
}

/// The released shards the durable state's pages hold, if it knows them: a fenced state (lost,
/// damaged, upgraded) does not.
fn of_state() -> Option<Released> {
    match pages::read() {
        Found::State(state) if state.header.fence.is_none() => Some(Released::from_pairs(
            state.released().map(|(s, id)| (s.get(), id)),
        )),
        _ => None,
    }
}
