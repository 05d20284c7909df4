//! Every wait of snowid's cluster-wide statements on a lock another session holds, and its one
//! bound, [`LOCK_WAIT`]: a table a resume reads, a database's record a change writes, a database
//! a worker connects to, and snowid's own cluster-wide lock (see `super::releases`). None waits
//! longer; each ends with an error that names what was locked and the processes holding it, and
//! a cancel or `statement_timeout` ends each wait at once.
//!
//! - A table or a record: [`lock_relation`], polled, so that a survey goes on past a table it
//!   could not lock, naming it;
//! - a database: the worker's `lock_timeout` is the bound from before it connects (see
//!   `super::databases::worker`), and [`holders_of_database`] names who held it;
//! - the cluster-wide lock: [`acquire`], polled the same way, and [`holders_of`].

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// How long any of snowid's cluster-wide statements, and any of their workers, waits for a lock
/// another session holds, before it gives up and names the holder.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// [`LOCK_WAIT`] in words, for messages.
pub fn lock_wait_words() -> String {
    format!("{} s", LOCK_WAIT.as_secs())
}

/// [`LOCK_WAIT`] as a `lock_timeout` setting.
pub fn lock_wait_setting() -> std::ffi::CString {
    std::ffi::CString::new(format!("{}ms", LOCK_WAIT.as_millis())).unwrap_or_default()
}

/// How long a poll sleeps between tries.
const POLL_MS: std::ffi::c_long = 10;

/// Tries `take` until it succeeds, or until [`LOCK_WAIT`] has passed (at once when `wait` is
/// false). Cancels and `statement_timeout` end the wait with their error.
fn poll(wait: bool, mut take: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if take() {
            return true;
        }
        if !wait || started.elapsed() >= LOCK_WAIT {
            return false;
        }
        // SAFETY: MyLatch is set up in every backend and worker; the wait honours postmaster
        // death, and the check after it cancels and timeouts.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                POLL_MS,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        pg_sys::check_for_interrupts!();
    }
}

/// Locks a relation of the current database in `mode` until the transaction ends, waiting at
/// most [`LOCK_WAIT`] (or not at all) for the transactions that hold a conflicting lock; where
/// it could not, the processes that hold one.
pub fn lock_relation(relation: pg_sys::Oid, mode: u32, wait: bool) -> Result<(), Vec<i32>> {
    // SAFETY: a conditional lock of a relation by OID, which never waits, and takes in the
    // invalidations that a lock granted after a change of the relation needs.
    let taken = poll(wait, || unsafe {
        pg_sys::ConditionalLockRelationOid(relation, mode as pg_sys::LOCKMODE)
    });
    match taken {
        true => Ok(()),
        false => Err(holders(
            "locktype OPERATOR(pg_catalog.=) 'relation' \
             AND database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database \
                 WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) \
             AND relation OPERATOR(pg_catalog.=) $1",
            relation,
            mode,
        )),
    }
}

/// Takes a database's own lock in `mode` (as `LockSharedObject` does) if nobody holds it in a
/// conflicting one, without waiting; whether it did.
pub fn try_lock_database(database: pg_sys::Oid, mode: u32) -> bool {
    let tag = pg_sys::LOCKTAG {
        locktag_field1: pg_sys::InvalidOid.into(),
        locktag_field2: pg_sys::DatabaseRelationId.into(),
        locktag_field3: database.into(),
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    };
    // SAFETY: a transaction-level lock of a shared object that never waits; a lock granted is
    // followed by the invalidations it lets in, as LockSharedObject does.
    unsafe {
        let taken = pg_sys::LockAcquire(&tag, mode as pg_sys::LOCKMODE, false, true)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL;
        if taken {
            pg_sys::AcceptInvalidationMessages();
        }
        taken
    }
}

/// Takes a lock of snowid's own (`tag`) in `mode`, waiting at most [`LOCK_WAIT`]; where it
/// could not, the processes that hold a conflicting one. Kept until released, or until the
/// transaction ends.
pub fn acquire(tag: &pg_sys::LOCKTAG, mode: u32) -> Result<(), Vec<i32>> {
    // SAFETY: a transaction-level lock that never waits (`dontWait`); the tag is snowid's own.
    let taken = poll(true, || unsafe {
        pg_sys::LockAcquire(tag, mode as pg_sys::LOCKMODE, false, true)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    });
    match taken {
        true => Ok(()),
        false => Err(holders_of(tag, mode)),
    }
}

/// The processes that hold an advisory lock with `tag`'s keys in a mode conflicting with `mode`.
pub fn holders_of(tag: &pg_sys::LOCKTAG, mode: u32) -> Vec<i32> {
    let keys = format!(
        "locktype OPERATOR(pg_catalog.=) 'advisory' AND database OPERATOR(pg_catalog.=) {} \
         AND classid OPERATOR(pg_catalog.=) {} AND objid OPERATOR(pg_catalog.=) {} \
         AND objsubid OPERATOR(pg_catalog.=) {} AND $1 IS NOT NULL",
        tag.locktag_field1, tag.locktag_field2, tag.locktag_field3, tag.locktag_field4
    );
    holders(&keys, pg_sys::InvalidOid, mode)
}

/// The processes that hold a database's own lock, or wait for it (a connection waits behind a
/// statement queued for a mode that conflicts with it, such as a `CREATE DATABASE` copying it,
/// as much as behind one holding such a mode), those holding it first.
pub fn holders_of_database(database: pg_sys::Oid) -> Vec<i32> {
    holders(
        "locktype OPERATOR(pg_catalog.=) 'object' AND database OPERATOR(pg_catalog.=) 0 \
         AND classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_database'::pg_catalog.regclass \
         AND objid OPERATOR(pg_catalog.=) $1",
        database,
        ANY_MODE,
    )
}

/// For [`holders`]: a lock in any mode.
const ANY_MODE: u32 = 0;

/// The lock modes that conflict with `mode`, by the names `pg_locks` gives them (every mode for
/// [`ANY_MODE`]).
fn conflicting(mode: u32) -> &'static [&'static str] {
    const ALL: [&str; 8] = [
        "AccessShareLock",
        "RowShareLock",
        "RowExclusiveLock",
        "ShareUpdateExclusiveLock",
        "ShareLock",
        "ShareRowExclusiveLock",
        "ExclusiveLock",
        "AccessExclusiveLock",
    ];
    match mode {
        pg_sys::AccessShareLock => &ALL[7..],
        pg_sys::RowShareLock => &ALL[6..],
        pg_sys::RowExclusiveLock => &ALL[4..],
        pg_sys::ShareUpdateExclusiveLock => &ALL[3..],
        pg_sys::ShareLock => &[ALL[2], ALL[3], ALL[5], ALL[6], ALL[7]],
        pg_sys::ShareRowExclusiveLock => &ALL[2..],
        pg_sys::ExclusiveLock => &ALL[1..],
        _ => &ALL[..],
    }
}

/// The other processes whose lock (granted, or waited for ahead of this one) matches `keys`
/// (with `$1` the OID `oid`) in a mode that conflicts with `mode`: those holding one first.
fn holders(keys: &str, oid: pg_sys::Oid, mode: u32) -> Vec<i32> {
    let modes: Vec<String> = conflicting(mode).iter().map(|m| format!("'{m}'")).collect();
    let query = format!(
        "SELECT pid FROM pg_catalog.pg_locks \
         WHERE {keys} AND mode IN ({}) AND pid IS NOT NULL \
           AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() \
         GROUP BY pid ORDER BY pg_catalog.bool_or(granted) DESC, pid",
        modes.join(", ")
    );
    // SAFETY: whether a snapshot is active is a plain read; one is pushed for the query where
    // none is (at commit, say), and popped after it.
    let pushed = unsafe {
        let none = !pg_sys::ActiveSnapshotSet();
        if none {
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        none
    };
    let pids = Spi::connect(|client| {
        client
            .select(&query, None, &[oid.into()])?
            .map(|row| Ok(row.get::<i32>(1)?.unwrap_or_default()))
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_default();
    if pushed {
        // SAFETY: the snapshot pushed above.
        unsafe { pg_sys::PopActiveSnapshot() };
    }
    pids
}

/// Processes in words: "process 123, 456", or that none holds it any more.
pub fn processes(pids: &[i32]) -> String {
    match pids {
        [] => "a process that has ended since".into(),
        [one] => format!("process {one}"),
        many => format!(
            "processes {}",
            many.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
