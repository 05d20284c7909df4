//! The cluster's released shards, in one place: a release, a take-back and a fence lift, each
//! carried out in the durable state, the cluster's witness (`global/9129`) and every database's
//! record (`snowid_released_shards`) in the order `snowid_core::release_records` gives, so that
//! no record ever says less than the state; and an install's record, written at its commit.
//!
//! # The cluster-wide lock
//!
//! Each of them holds one heavyweight lock, [`ClusterLock`]: an advisory lock of database 0,
//! which no role can take with `pg_advisory_lock` (that names its own database), shown in
//! `pg_locks` as `advisory` with `database` 0, `classid` 1936617335 ("snow") and `objid` 1. A
//! release, a take-back and a fence lift take it exclusively for their whole run, and give it
//! back when they end (they are not undone by ROLLBACK, so nothing waits for their commit); a
//! transaction that installs snowid, or updates it to a version with a record, takes it
//! exclusively at commit (in `PRE_COMMIT`), writes its database's record from the state, and
//! keeps it until the commit is done; `CREATE DATABASE` takes it shared for its copy, once it
//! holds PostgreSQL's own lock on the template. Nobody waits for it longer than
//! `super::waits::LOCK_WAIT`, and nobody takes it while waiting for a lock of PostgreSQL's. So:
//! - a release, a take-back or a fence lift reads and writes every database that will ever have
//!   snowid: an install that commits meanwhile writes its own record after it, from the state it
//!   left, and a release made in the same transaction as `CREATE EXTENSION` is in that record;
//! - a database copied from a template copies a record that no change is rewriting;
//! - none of them runs while another does.
//!
//! Nobody but these takes the lock, and none of them holds it while waiting on anything a
//! database owner controls: its workers wait at most a bound for a table or a record another
//! transaction has locked, and then fail, naming it. A transaction that installed snowid cannot
//! be prepared (`PREPARE TRANSACTION` would hold the lock until `COMMIT PREPARED`).
//!
//! # What a failure or a cancel leaves
//!
//! Each error says which step held: a release cancelled or failed before it was durable issues
//! again (the records that already list it say more than the state, the safe side); a take-back
//! or a fence lift is durable and in force before any record is written, and a record that could
//! not be written then says more than the state.

use crate::errors;
use crate::server::databases::{self, Recording};
use crate::server::issuing::{generator, raise_refusal};
use crate::server::state::{pages, witness};
use crate::server::waits;
use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use snowid_core::durable::Unavailable;
use snowid_core::generator::{Refused, Shared, Stopped};
use snowid_core::layout::{Parts, Shard};
use snowid_core::release_records::Released;
use snowid_core::startup::Found;
use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;

/// The lock's keys: "snow", and 1.
const LOCK_KEYS: (u32, u32) = (u32::from_be_bytes(*b"snow"), 1);

/// The cluster-wide lock on the released shards (see the top of this module), held until
/// dropped, or until the transaction ends.
pub struct ClusterLock {
    tag: pg_sys::LOCKTAG,
    mode: pg_sys::LOCKMODE,
    /// Kept until the transaction ends, rather than given back when dropped.
    to_commit: bool,
}

impl ClusterLock {
    /// Takes the lock, waiting at most `waits::LOCK_WAIT` for whoever holds it, then raising an
    /// error that names them and `what` waited (a cancel ends the wait too).
    fn take(mode: u32, to_commit: bool, what: &str) -> ClusterLock {
        let lock = ClusterLock {
            tag: ClusterLock::tag(),
            mode: mode as pg_sys::LOCKMODE,
            to_commit,
        };
        if let Err(holders) = waits::acquire(&lock.tag, mode) {
            std::mem::forget(lock);
            errors::cluster_lock_held(what, &waits::lock_wait_words(), &waits::processes(&holders));
        }
        lock
    }

    /// The lock's tag.
    fn tag() -> pg_sys::LOCKTAG {
        pg_sys::LOCKTAG {
            locktag_field1: 0,
            locktag_field2: LOCK_KEYS.0,
            locktag_field3: LOCK_KEYS.1,
            locktag_field4: 2,
            locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        }
    }

    /// Takes the lock if nobody holds it in a conflicting mode, without waiting.
    fn try_take(mode: u32, to_commit: bool) -> Option<ClusterLock> {
        let lock = ClusterLock {
            tag: ClusterLock::tag(),
            mode: mode as pg_sys::LOCKMODE,
            to_commit,
        };
        // SAFETY: a transaction-level lock on snowid's own tag that never waits.
        let taken = unsafe {
            pg_sys::LockAcquire(&lock.tag, lock.mode, false, true)
                != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
        };
        match taken {
            true => Some(lock),
            false => {
                std::mem::forget(lock);
                None
            }
        }
    }

    /// Gives the lock back now, even one kept until the transaction ends.
    fn give_back(self) {
        // SAFETY: gives back the lock `take` took.
        unsafe { pg_sys::LockRelease(&self.tag, self.mode, false) };
        std::mem::forget(self);
    }

    /// Exclusively, for a release, a take-back or a fence lift (`what`).
    pub fn for_a_change(what: &str) -> ClusterLock {
        ClusterLock::take(pg_sys::ExclusiveLock, false, what)
    }
}

impl Drop for ClusterLock {
    fn drop(&mut self) {
        if !self.to_commit {
            // SAFETY: gives back the lock `take` took; after an error the transaction's abort
            // has released it already, and this finds nothing to release.
            unsafe { pg_sys::LockRelease(&self.tag, self.mode, false) };
        }
    }
}

/// The released shards the durable state holds, if it knows them: a fenced state (lost,
/// damaged, upgraded) does not.
pub fn of_state() -> Option<Released> {
    match pages::read() {
        Found::State(state) if state.header.fence.is_none() => Some(Released::from_pairs(
            state.released().map(|(s, id)| (s.get(), id)),
        )),
        _ => None,
    }
}

/// What a step of a change was ended by: an error's SQLSTATE and message (a cancel's, most
/// often).
pub struct Interruption {
    pub code: String,
    pub message: String,
}

/// A change of the released shards under way in this backend, for what a FATAL error (a
/// `pg_terminate_backend`, say) ends without unwinding: the exit callback undoes what an ERROR
/// would, and says in the server log what holds.
struct InFlight {
    change: Unfinished,
    written: Vec<String>,
    writing: Option<String>,
}

/// What a change under way has done that an exit must know.
enum Unfinished {
    /// A release, stopped in memory, not durable yet: an exit lets the shard issue again.
    Release {
        state: &'static Shared,
        stopped: Stopped,
    },
    /// A take-back or a fence lift, durable and in force: an exit undoes nothing.
    Durable { what: String },
}

thread_local! {
    static IN_FLIGHT: RefCell<Option<InFlight>> = const { RefCell::new(None) };
    static EXIT_CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Marks `change` as under way until dropped (or until [`InFlightGuard::durable`]).
struct InFlightGuard;

impl InFlightGuard {
    fn begin(change: Unfinished) -> InFlightGuard {
        if !EXIT_CALLBACK_REGISTERED.with(|flag| flag.replace(true)) {
            // SAFETY: a callback for this process's exit, with no argument; it runs before
            // shared memory is detached.
            unsafe { pg_sys::before_shmem_exit(Some(at_exit), pg_sys::Datum::from(0)) };
        }
        IN_FLIGHT.with(|f| {
            f.replace(Some(InFlight {
                change,
                written: Vec::new(),
                writing: None,
            }))
        });
        InFlightGuard
    }

    /// Notes the records written so far, and the database written next.
    fn writing(recording: &Recording, database: &str) {
        IN_FLIGHT.with(|f| {
            if let Some(in_flight) = f.borrow_mut().as_mut() {
                in_flight.written = recording.written.clone();
                in_flight.writing = Some(database.to_string());
            }
        });
    }

    /// The change is durable: nothing an exit does may undo it.
    fn durable() {
        IN_FLIGHT.with(|f| f.replace(None));
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        IN_FLIGHT.with(|f| f.replace(None));
    }
}

/// On a FATAL error (or any exit) with a change under way: a release not yet durable issues
/// again, as after an ERROR, so that memory agrees with the state and the WAL; the records
/// already written say more than the state (the safe side) until the next change writes them.
/// Says so in the server log.
#[pg_guard]
unsafe extern "C-unwind" fn at_exit(_code: std::ffi::c_int, _argument: pg_sys::Datum) {
    let Some(in_flight) = IN_FLIGHT.with(|f| f.replace(None)) else {
        return;
    };
    let mut written = in_flight.written.clone();
    written.extend(
        in_flight
            .writing
            .iter()
            .map(|d| format!("{d} (being written)")),
    );
    let records = match written.is_empty() {
        true => "no database's record lists it yet".to_string(),
        false => format!(
            "the records of {} may list it until the next release, take-back or fence lift \
             writes them",
            written.join(", ")
        ),
    };
    match in_flight.change {
        Unfinished::Release { state, stopped } => {
            generator(state).resume_issuing(stopped);
            log!(
                "snowid shard {} was not released: the process releasing it ended before the \
                 release was durable, so the shard issues IDs on this server again; {records}",
                stopped.shard.get()
            );
        }
        Unfinished::Durable { what } => log!(
            "{what} is durable and in force, but the process recording it in every database \
             ended before it had; {records}"
        ),
    }
}

/// Writes `released` into the cluster's witness and every database's record. Returns how far it
/// got. An error that ends it (a cancel, most often) is passed to `on_error` with what was
/// written, which raises the error that says what holds.
fn record_everywhere(
    released: &Released,
    on_error: impl FnOnce(&Recording, Interruption),
) -> Recording {
    witness::record_released(&released.shard_set());
    let pairs = released.pairs();
    let recording = RefCell::new(Recording::default());
    let interrupted = PgTryBuilder::new(AssertUnwindSafe(|| {
        databases::record_in_every_database(
            &pairs,
            &mut recording.borrow_mut(),
            &mut InFlightGuard::writing,
        );
        None
    }))
    .catch_others(|caught| match caught {
        CaughtError::PostgresError(e)
        | CaughtError::ErrorReport(e)
        | CaughtError::RustPanic { ereport: e, .. } => Some(Interruption {
            code: errors::sqlstate(e.sql_error_code()),
            message: e.message().to_string(),
        }),
    })
    .execute();
    if let Some(interruption) = interrupted {
        let message = interruption.message.clone();
        on_error(&recording.borrow(), interruption);
        errors::catalog_read_failed(&message);
    }
    recording.into_inner()
}

/// The released shards the durable state holds, for a change that needs them: a fenced or
/// unreadable state refuses the change.
fn state_list(shard: Shard) -> Released {
    match of_state() {
        Some(released) => released,
        None => match generator_status_refusal() {
            Some(refused) => raise_refusal(refused, shard),
            None => errors::catalog_read_failed(&"snowid's state could not be read"),
        },
    }
}

fn generator_status_refusal() -> Option<Refused<Unavailable>> {
    crate::server::shared_memory::state()
        .and_then(|state| generator(state).status().map_or_else(Some, |s| s.refusal()))
}

/// Releases a shard on this server: no statement here issues another ID for it from the
/// moment this is called, and once it returns no server that replays this one's WAL does, nor
/// this one after its state is lost or `pg_upgrade`. Returns its last ID.
pub fn release(state: &'static Shared, shard: Shard) -> i64 {
    let _lock = ClusterLock::for_a_change("snowid_release()");
    let g = generator(state);
    let stopped = g
        .stop_issuing(shard)
        .unwrap_or_else(|refused| raise_refusal(refused, shard));
    let listed = state_list(shard).with(shard, stopped.last_id);
    let _in_flight = InFlightGuard::begin(Unfinished::Release { state, stopped });
    let recording = record_everywhere(&listed, |recording, interruption| {
        g.resume_issuing(stopped);
        errors::release_interrupted(
            shard.get(),
            &interruption.code,
            &interruption.message,
            &recording.written,
        )
    });
    if let Some((database, failure)) = &recording.failed {
        g.resume_issuing(stopped);
        // The witness and the records written already list the shard: written back as the
        // state has them, as far as they can be (a failure here leaves them saying more than
        // the state).
        let state_has = state_list(shard);
        witness::record_released(&state_has.shard_set());
        let mut back = Recording::default();
        databases::record_in_databases(&recording.written, &state_has.pairs(), &mut back);
        let still: Vec<String> = recording
            .written
            .iter()
            .filter(|d| !back.written.contains(d))
            .cloned()
            .collect();
        errors::release_not_recordable(
            shard.get(),
            database,
            &failure.code,
            &failure.describe(),
            &still,
        );
    }
    g.make_release_durable_then(&stopped, &mut InFlightGuard::durable)
        .unwrap_or_else(|refused| {
            // Not durable: the shard issues again, as for every failure before this step.
            if !matches!(refused, Refused::Persist(Unavailable::NotReplicated(_))) {
                g.resume_issuing(stopped);
            }
            raise_refusal(refused, shard)
        })
}

/// Whether a change was made durable here, and is in force: it succeeded, or only the wait for
/// the synchronous standbys was cancelled.
fn durable_here<T>(outcome: &Result<T, Refused<Unavailable>>) -> bool {
    matches!(
        outcome,
        Ok(_) | Err(Refused::Persist(Unavailable::NotReplicated(_)))
    )
}

/// Takes back a shard released here, above an ID of it its other owner issued. Returns the time
/// base's new floor.
pub fn take_back(state: &'static Shared, shard: Shard, above: Parts) -> i64 {
    let _lock = ClusterLock::for_a_change("snowid_take_back()");
    let taken = generator(state).take_back(above);
    // Durable and in force here even where the wait for the standbys was cancelled: every
    // record drops the shard either way, and then the cancel is reported.
    if durable_here(&taken) {
        let _in_flight = InFlightGuard::begin(Unfinished::Durable {
            what: format!("the take-back of snowid shard {}", shard.get()),
        });
        let listed = state_list(shard);
        let recording = record_everywhere(&listed, |recording, interruption| {
            errors::take_back_not_recorded(
                shard.get(),
                None,
                &interruption.code,
                &interruption.message,
                &recording.written,
            )
        });
        if let Some(failed) = &recording.failed {
            let (database, failure) = failed;
            errors::take_back_not_recorded(
                shard.get(),
                Some(database),
                &failure.code,
                &failure.describe(),
                &recording.written,
            );
        }
    }
    taken.unwrap_or_else(|refused| raise_refusal(refused, shard))
}

/// Lifts a fence: releases again, durably, each of `released` (a shard with its last ID), then
/// resumes above `above`, then writes what the state holds into every record. Call with the
/// [`ClusterLock`] held, taken before the databases were read. Returns the time base's new
/// floor.
pub fn lift_fence(state: &'static Shared, above: Parts, released: &[(Shard, i64)]) -> i64 {
    let shard = Shard::new(above.shard).unwrap_or_else(|| errors::shard_out_of_range(above.shard));
    let lifted = generator(state).resume_above_releasing(above, released);
    // A cancel while a release again waited for the standbys leaves the fence up: the records
    // stay as they are, and say no less than the state.
    if let (true, Some(listed)) = (durable_here(&lifted), of_state()) {
        let _in_flight = InFlightGuard::begin(Unfinished::Durable {
            what: "snowid's fence lift".into(),
        });
        let recording = record_everywhere(&listed, |recording, interruption| {
            errors::fence_lift_not_recorded(
                None,
                &interruption.code,
                &interruption.message,
                &recording.written,
            )
        });
        if let Some(failed) = &recording.failed {
            let (database, failure) = failed;
            errors::fence_lift_not_recorded(
                Some(database),
                &failure.code,
                &failure.describe(),
                &recording.written,
            );
        }
    }
    lifted.unwrap_or_else(|refused| raise_refusal(refused, shard))
}

thread_local! {
    /// Whether this backend's transaction installed or updated snowid in its database, which
    /// then writes its record at commit.
    static RECORD_AT_COMMIT: Cell<bool> = const { Cell::new(false) };
    /// Whether this backend has registered its transaction callback.
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Has this transaction write its database's record at commit, from the durable state then,
/// under the [`ClusterLock`]: for `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE`.
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

/// Writes this database's record from the durable state, and the cluster's witness, as the
/// superuser that owns the record (this transaction's user may be a database owner who
/// installed the trusted extension), holding the [`ClusterLock`] until the commit is done. A
/// fenced state knows no release: the record stays empty, which says so.
fn write_own_record() {
    let _lock = ClusterLock::take(pg_sys::ExclusiveLock, true, "the commit of this install");
    let Some(released) = of_state() else {
        return;
    };
    witness::record_released(&released.shard_set());
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: as the extension's script ran, as the bootstrap superuser, for a write of
    // snowid's own table (with no trigger or rule, checked by `write_here`); restored below.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            pg_sys::BOOTSTRAP_SUPERUSERID.into(),
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
    }
    // SAFETY: at commit no portal holds a snapshot: SPI gets one of its own, popped below.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    let written = databases::release_records::write_here(&released.pairs());
    // SAFETY: back to the snapshot and the identity found above.
    unsafe {
        pg_sys::PopActiveSnapshot();
        pg_sys::SetUserIdAndSecContext(user, context);
    }
    // A table that is not snowid's own is not written: its database then knows nothing of the
    // releases, which a fence lift says.
    if let Err(failure) = written {
        errors::install_not_recorded(&failure.code, &failure.describe());
    }
}

/// Takes the [`ClusterLock`] shared until the transaction ends, for `CREATE DATABASE`, whose
/// copy of a template's record no change of the released shards may rewrite meanwhile; and
/// PostgreSQL's own lock on the template (the one its copy takes), never waiting for either while
/// it holds the other. A copy waiting for the template (another session's `COMMENT ON DATABASE`
/// held open, say) then holds nothing of snowid's, and stalls no release; and a release, whose
/// worker connects to the template (which the copy's lock keeps out), never waits for a copy
/// that waits for the release.
pub fn hold_for_database_copy(template: pg_sys::Oid) {
    let database = |function: unsafe fn(pg_sys::Oid, pg_sys::Oid, u16, i32)| {
        // SAFETY: PostgreSQL's own lock on a database object, in the mode its copy takes.
        unsafe {
            function(
                pg_sys::DatabaseRelationId,
                template,
                0,
                pg_sys::ShareLock as i32,
            )
        }
    };
    loop {
        let lock = ClusterLock::take(pg_sys::ShareLock, true, "this CREATE DATABASE");
        if waits::try_lock_database(template, pg_sys::ShareLock) {
            return;
        }
        lock.give_back();
        // PostgreSQL's own wait for its own lock, holding nothing of snowid's.
        database(pg_sys::LockSharedObject);
        if ClusterLock::try_take(pg_sys::ShareLock, true).is_some() {
            return;
        }
        database(pg_sys::UnlockSharedObject);
    }
}
