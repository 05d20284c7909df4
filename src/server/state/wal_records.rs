//! snowid's records in the WAL: a custom WAL resource manager.
//!
//! Every change of the durable state (see `snowid_core::durable`) is one record, inserted with
//! the pages it changes ([`super::pages`]): a lease (`LEASE`), a shard handed off (`RELEASE`), a
//! resume above known IDs (`RESUME`), a shard taken back (`TAKE_BACK`, which is also how 0.4.0
//! wrote its resumes), and the first load on a new timeline (`PROMOTION`). Creating the state,
//! and fencing it for `pg_upgrade`, is a record of full-page images, of PostgreSQL's own kind;
//! snowid 0.3.0 created it as `INIT`, which this version still replays. Replaying one, on a
//! standby, in crash recovery or in a restore, changes the same pages the same way; the pages
//! then reach disk at the next restartpoint or checkpoint, like any others. Replay writes no file
//! and touches no shared memory of snowid's: whoever generates next, once recovery is over,
//! loads the state from the pages.
//!
//! snowid 0.2.0's lease records (info 0x00, `LEASE_0_2_0`) are read and skipped, with a line in
//! the log: they name no page, and the state they belonged to (0.2.0's `snowid.state`) is not
//! carried over, so a cluster whose WAL still holds them finds its state missing beside that
//! file and is fenced until resumed above the IDs its databases hold (see
//! `snowid_core::startup`). A crash recovery, a restore or a standby through 0.2.0-era WAL thus
//! runs on.
//!
//! A server that replays these records must load snowid through `shared_preload_libraries`
//! too: PostgreSQL stops recovery at the first record of a resource manager it does not know.

use super::pages;
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{Change, Kind, RMGR_ID};
use std::ffi::{c_char, CString};

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

/// The WAL timeline this server writes on (a promotion or a point-in-time restore starts a new
/// one). Call on a server that is not in recovery.
pub fn timeline() -> u32 {
    // SAFETY: a plain read of the insertion timeline, valid once recovery has ended.
    unsafe { pg_sys::GetWALInsertionTimeLine() }
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

/// What a record holds, or why it cannot be read.
fn decode(info: u8, data: &[u8]) -> Result<Change, String> {
    let kind = Kind::from_info(info).ok_or_else(|| format!("an unknown kind ({info:#04x})"))?;
    Change::from_bytes(kind, data).map_err(|e| e.to_string())
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a valid reader state.
    let (info, data) = unsafe { contents(record) };
    match decode(info, data) {
        Ok(change @ Change::Lease020 { .. }) => log!(
            "snowid skipped a WAL record of snowid 0.2.0 ({}); the state of 0.2.0 is not carried over, so the first generation is fenced until a superuser resumes above the IDs already issued",
            change.describe()
        ),
        // SAFETY: as above.
        Ok(change) => unsafe { pages::replay(record, &change) },
        Err(why) => ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("snowid cannot replay a WAL record: {why}")
        ),
    }
}

/// How `pg_waldump`, `pg_walinspect` and error contexts show a record.
#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a valid reader state.
    let (info, data) = unsafe { contents(record) };
    let text = match decode(info, data) {
        Ok(change) => change.describe(),
        Err(why) => format!("malformed: {why}"),
    };
    let text = CString::new(text).unwrap_or_default();
    // SAFETY: `buf` is a valid StringInfo; the text is NUL-terminated.
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    let info = info & !(pg_sys::XLR_INFO_MASK as u8);
    Kind::from_info(info).map_or(std::ptr::null(), |kind| kind.name().as_ptr())
}
