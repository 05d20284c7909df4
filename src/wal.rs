//! The lease in the WAL: a custom WAL resource manager.
//!
//! Every lease a primary makes durable is also a WAL record, flushed before any ID under the
//! lease is handed out (see [`crate::host`]). Replaying it, on a standby, in crash recovery or in
//! a restore from a base backup, raises every shard above the lease and the time base to the
//! recorded base, and writes the state file durably, so a restartpoint that passes the record
//! loses nothing. A promoted standby or a restored cluster thereby resumes above every ID whose
//! lease it replayed, whatever its clock says.
//!
//! A server that replays these records must load snowid through `shared_preload_libraries`
//! too: PostgreSQL stops recovery at the first record of a resource manager it does not know.

use crate::{gucs, shmem};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::{sample_patiently, SystemClock};
use snowid_core::epoch;
use snowid_core::lease::Record;
use std::ffi::{c_char, CStr, CString};

/// snowid's resource manager ID. 128 is `RM_EXPERIMENTAL_ID`, the ID PostgreSQL sets aside for
/// extensions in development; a unique one must be reserved on PostgreSQL's list of custom WAL
/// resource managers before snowid 1.0.
pub const RMGR_ID: u8 = 128;
/// The one kind of record: a lease (its end, the time base and the epoch).
const LEASE: u8 = 0x00;

static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"snowid".as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: None,
};

/// Registers the resource manager. Call only from `_PG_init` during preload.
pub fn register() {
    // SAFETY: called once, during preload; PostgreSQL keeps the pointer to the static.
    unsafe { pg_sys::RegisterCustomRmgr(RMGR_ID as _, &raw mut RMGR) };
}

/// Writes a lease record and flushes the WAL up to it.
pub fn log_lease(record: &Record) {
    let mut bytes = record.to_bytes();
    // SAFETY: the standard sequence for a record with main data only; `bytes` outlives the
    // insert, which copies it.
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(bytes.as_mut_ptr() as _, bytes.len() as _);
        let lsn = pg_sys::XLogInsert(RMGR_ID as _, LEASE);
        pg_sys::XLogFlush(lsn);
    }
}

/// The record's main data and info bits.
///
/// # Safety
///
/// `record` is the reader state PostgreSQL passes to a resource manager's callbacks.
unsafe fn contents<'a>(record: *mut pg_sys::XLogReaderState) -> (u8, &'a [u8]) {
    // SAFETY: guaranteed by the caller: the decoded record and its main data are valid while the
    // callback runs.
    unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info & !(pg_sys::XLR_INFO_MASK as u8);
        let data = if (*decoded).main_data.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(
                (*decoded).main_data.cast::<u8>(),
                (*decoded).main_data_len as usize,
            )
        };
        (info, data)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a valid reader state.
    let (info, data) = unsafe { contents(record) };
    let lease = match (info, Record::from_bytes(data)) {
        (LEASE, Ok(lease)) => lease,
        (_, result) => {
            let why = result
                .err()
                .map_or("an unknown kind".into(), |e| e.to_string());
            ereport!(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("snowid cannot replay a WAL record: {why}")
            );
            return;
        }
    };
    if let Some(state) = shmem::state() {
        state.replay(
            &lease,
            gucs::epoch_unix_ms(),
            sample_patiently(&SystemClock),
        );
    }
    if let Err(e) = shmem::absorb_replayed(&lease) {
        ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!(
                "could not write snowid high-water mark file \"{}\" during replay: {e}",
                snowid_core::lease::FILE_NAME
            )
        );
    }
}

/// How `pg_waldump` and error contexts show a record.
#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a valid reader state.
    let (_, data) = unsafe { contents(record) };
    let text = match Record::from_bytes(data) {
        Ok(r) => format!(
            "lease until {}, time base {}, epoch {}",
            epoch::format(r.lease_end_unix_ms),
            epoch::format(r.base_unix_ms),
            epoch::format(r.epoch_unix_ms)
        ),
        Err(e) => format!("malformed: {e}"),
    };
    let text = CString::new(text).unwrap_or_default();
    // SAFETY: `buf` is a valid StringInfo; the text is NUL-terminated.
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    const NAME: &CStr = c"LEASE";
    match info & !(pg_sys::XLR_INFO_MASK as u8) {
        LEASE => NAME.as_ptr(),
        _ => std::ptr::null(),
    }
}
