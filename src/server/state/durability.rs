//! When a change of the durable state may be used: once its WAL record is flushed here and, if
//! synchronous standbys are configured, flushed on them too, as a commit under
//! `synchronous_commit = on` would wait, whatever this session's `synchronous_commit` says: the
//! record covers IDs for every session, not just this one.
//!
//! Whether standbys are configured is read from the state the walsenders and the checkpointer
//! share (`WalSndCtl`), as PostgreSQL's own commit wait reads it, not from this backend's copy of
//! `synchronous_standby_names`, which a backend that has not yet seen a reload would still hold.
//! A server with no walsenders (single-user mode, `max_wal_senders = 0`) waits for no standby.
//!
//! The wait is snowid's own: it sleeps on the process latch and watches the position the
//! synchronous standbys have confirmed. A cancel or `statement_timeout` ends it with snowid's
//! error (57014, saying that nothing under the change was handed out), not with PostgreSQL's
//! warning for a cancelled commit, which would say that a transaction committed; a termination
//! or the postmaster's death ends it as anywhere else.

use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{Change, Unavailable};
use std::ffi::c_long;
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};

/// A change's record is not on the synchronous standbys: the wait for them was cancelled.
#[derive(Debug)]
pub struct NotReplicated;

/// Makes a record durable before anything depending on it is used: flushes the WAL up to it,
/// then, if synchronous standbys are configured, waits until they have flushed it too. A cancel
/// ends the wait with [`NotReplicated`]; then what depends on the standbys must not be used.
pub fn make_durable(lsn: pg_sys::XLogRecPtr) -> Result<(), NotReplicated> {
    flush(lsn);
    wait_for_sync_standbys(lsn)
}

/// Flushes the WAL up to a record this process inserted: durable here.
pub fn flush(lsn: pg_sys::XLogRecPtr) {
    // SAFETY: XLogFlush on a location this process inserted.
    unsafe { pg_sys::XLogFlush(lsn) };
}

/// If synchronous standbys are configured, waits until they have flushed the WAL up to `lsn`.
/// A cancel ends the wait with [`NotReplicated`].
pub fn wait_for_sync_standbys(lsn: pg_sys::XLogRecPtr) -> Result<(), NotReplicated> {
    while sync_standbys_configured() {
        if confirmed_flush() >= lsn {
            return Ok(());
        }
        // SAFETY: plain reads and writes of this process's interrupt flags, as PostgreSQL's
        // commit wait does: the cancel is taken here, so no later statement sees it.
        unsafe {
            if pg_sys::ProcDiePending != 0 {
                pg_sys::check_for_interrupts!();
            }
            if pg_sys::QueryCancelPending != 0 {
                pg_sys::QueryCancelPending = 0;
                return Err(NotReplicated);
            }
        }
        // SAFETY: MyLatch is set up for every backend before it runs SQL; the walsenders do
        // not set it for this wait, so it is also bounded by a short timeout.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                1 as c_long,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
    }
    Ok(())
}

/// The position every synchronous standby the configuration requires has flushed.
fn confirmed_flush() -> pg_sys::XLogRecPtr {
    // SAFETY: WalSndCtl exists whenever synchronous standbys can be configured (checked by the
    // caller); the position only grows, and an 8-byte aligned read is atomic here, as
    // PostgreSQL's own unlocked reads of it assume.
    unsafe {
        std::ptr::read_volatile(&(*pg_sys::WalSndCtl).lsn[pg_sys::SYNC_REP_WAIT_FLUSH as usize])
    }
}

/// Whether this server waits for synchronous standbys, as the walsenders see the setting.
fn sync_standbys_configured() -> bool {
    // SAFETY: plain reads of settings and of the shared walsender state, which exists when the
    // server has walsenders.
    unsafe {
        if pg_sys::max_wal_senders == 0 || pg_sys::WalSndCtl.is_null() || !pg_sys::IsUnderPostmaster
        {
            return false;
        }
        // The byte after the confirmed positions: `sync_standbys_status` (flags) in the minor
        // releases of May 2025 and later, `sync_standbys_defined` (a bool) before. Both sit
        // there, one byte wide; which one it is depends on the running server, not on the
        // headers snowid was built with, so it is read by place and told apart by version.
        let lsn = std::ptr::addr_of!((*pg_sys::WalSndCtl).lsn);
        let byte = std::ptr::read_volatile(lsn.cast::<u8>().add(size_of_val(&*lsn)));
        if !status_flags() {
            return byte != 0;
        }
        if byte & SYNC_STANDBY_INIT != 0 {
            byte & SYNC_STANDBY_DEFINED != 0
        } else {
            // Until the checkpointer has first published the setting: this backend's copy, as
            // PostgreSQL's commit wait does.
            !pg_sys::SyncRepStandbyNames.is_null() && *pg_sys::SyncRepStandbyNames != 0
        }
    }
}

/// The flags of `sync_standbys_status`.
const SYNC_STANDBY_INIT: u8 = 1 << 0;
const SYNC_STANDBY_DEFINED: u8 = 1 << 1;

/// Whether the running server keeps `sync_standbys_status` flags (15.13, 16.9, 17.5, 18 and
/// later) rather than the `sync_standbys_defined` bool.
fn status_flags() -> bool {
    static VERSION: AtomicI32 = AtomicI32::new(0);
    let mut version = VERSION.load(Relaxed);
    if version == 0 {
        // SAFETY: a read of a built-in setting, which always exists; the string is PostgreSQL's.
        version = unsafe {
            let text = pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false);
            if text.is_null() {
                0
            } else {
                std::ffi::CStr::from_ptr(text)
                    .to_str()
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0)
            }
        };
        VERSION.store(version, Relaxed);
    }
    match version / 10000 {
        ..=14 => false,
        15 => version >= 150013,
        16 => version >= 160009,
        17 => version >= 170005,
        _ => true,
    }
}

/// Makes one change of the state durable: its WAL record with its pages, flushed; then
/// `in_force` runs, since the change holds here from then on; then the synchronous standbys
/// confirm it, if there are any. A cancel of that wait leaves the change durable and in force
/// here, and says so ([`Unavailable::NotReplicated`]).
pub fn persist(change: &Change, in_force: &mut dyn FnMut()) -> Result<(), Unavailable> {
    let lsn = super::pages::write(change).map_err(Unavailable::Damaged)?;
    flush(lsn);
    in_force();
    wait_for_sync_standbys(lsn)
        .map_err(|_| Unavailable::NotReplicated(Box::new(change.clone())))?;
    if let Change::Promotion {
        timeline,
        base_unix_ms,
    } = change
    {
        log!(
            "snowid recorded its promotion to timeline {timeline}: its time base starts no earlier than {}",
            snowid_core::epoch::format(*base_unix_ms)
        );
    }
    Ok(())
}
