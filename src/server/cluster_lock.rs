//! The cluster-wide lock on the released shards, [`ClusterLock`]: an advisory lock of database 0,
//! which no role can take with `pg_advisory_lock` (that names its own database), shown in
//! `pg_locks` as `advisory` with `database` 0, `classid` 1936617335 ("snow"), `objid` 1 and
//! `objsubid` 2.
//!
//! - A release, a take-back and a fence lift take it exclusively for their whole run, and give
//!   it back when they end (they are not undone by ROLLBACK, so nothing waits for their commit);
//! - a transaction that installs snowid, or updates it to a version with a record, takes it
//!   exclusively at commit (in `PRE_COMMIT`), writes its database's record, and keeps it until
//!   the commit is done;
//! - `CREATE DATABASE` takes it shared for its copy of a template's record, with PostgreSQL's
//!   own lock on the template, never waiting for one while it holds the other
//!   ([`hold_for_database_copy`]).
//!
//! So a release, a take-back or a fence lift reads and writes every database that will ever have
//! snowid (an install that commits meanwhile writes its own record after it, from the state it
//! left, and a release made in the same transaction as `CREATE EXTENSION` is in that record); a
//! database copied from a template copies a record no change is rewriting; and none of them runs
//! while another does. Nobody but these takes it; nobody waits for it longer than
//! `super::waits::LOCK_WAIT`, then fails naming who holds it; and nobody takes it while waiting
//! for a lock of PostgreSQL's. A transaction that installed snowid cannot be prepared (`PREPARE
//! TRANSACTION` would hold the lock until `COMMIT PREPARED`).

use crate::errors;
use crate::server::waits;
use pgrx::pg_sys;

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
    pub fn take(mode: u32, to_commit: bool, what: &str) -> ClusterLock {
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
