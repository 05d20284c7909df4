//! snowid's records in the WAL: a custom WAL resource manager.
//!
//! Every change of the durable state (see `snowid_core::durable`) is one record, inserted with
//! the pages it changes ([`super::pages`]): a lease (`LEASE`), a shard handed off (`RELEASE`), a
//! resume above known IDs (`RESUME`). The state's creation is a record of full-page images, of
//! PostgreSQL's own kind; snowid 0.3.0 wrote it as `INIT`, which this version still replays.
//! Replaying one, on a standby, in crash recovery or in a restore, changes the same pages the
//! same way; the pages then reach disk at the next restartpoint or checkpoint, like any others.
//! Replay writes no file and touches no shared memory of snowid's: whoever generates next, once
//! recovery is over, loads the state from the pages.
//!
//! snowid 0.2.0 wrote leases as records of their own (info 0x00), with no page. A server of
//! this version replays them (standbys are upgraded before their primary) into what the old file
//! says the state should start from ([`super::startup::cover_old_record`]) and into that file,
//! durably, as 0.2.0 did, so that a restartpoint passing them loses nothing.
//!
//! A server that replays these records must load snowid through `shared_preload_libraries`
//! too: PostgreSQL stops recovery at the first record of a resource manager it does not know.

use super::{pages, startup};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::durable::{Change, Kind, RMGR_ID};
use snowid_core::legacy::{self, Record};
use std::ffi::{c_char, CString};
use std::path::Path;

/// snowid 0.2.0's lease record.
const LEASE_V1: u8 = 0x00;

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
enum Decoded {
    Change(Change),
    LeaseV1(Record),
}

fn decode(info: u8, data: &[u8]) -> Result<Decoded, String> {
    if info == LEASE_V1 {
        return Record::from_bytes(data)
            .map(Decoded::LeaseV1)
            .map_err(|e| e.to_string());
    }
    let kind = Kind::from_info(info).ok_or_else(|| format!("an unknown kind ({info:#04x})"))?;
    Change::from_bytes(kind, data)
        .map(Decoded::Change)
        .map_err(|e| e.to_string())
}

#[pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a valid reader state.
    let (info, data) = unsafe { contents(record) };
    match decode(info, data) {
        // SAFETY: as above.
        Ok(Decoded::Change(change)) => unsafe { pages::replay(record, &change) },
        Ok(Decoded::LeaseV1(lease)) => replay_lease_v1(&lease),
        Err(why) => ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("snowid cannot replay a WAL record: {why}")
        ),
    }
}

/// A 0.2.0 lease: into the import to come and the old file, durably.
fn replay_lease_v1(lease: &Record) {
    startup::cover_old_record(lease);
    // SAFETY: plain reads of PostgreSQL's fsync setting and the data directory's mode.
    let (fsync, mode) = unsafe { (pg_sys::enableFsync, pg_sys::data_directory_mode as u32) };
    if let Err(e) = legacy::absorb(Path::new("."), lease, fsync, mode & 0o666) {
        ereport!(
            PgLogLevel::ERROR,
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!(
                "could not write snowid high-water mark file \"{}\" during replay: {e}",
                legacy::FILE_NAME
            )
        );
    }
}

/// How `pg_waldump`, `pg_walinspect` and error contexts show a record.
#[pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: PostgreSQL passes a valid reader state.
    let (info, data) = unsafe { contents(record) };
    let text = match decode(info, data) {
        Ok(Decoded::Change(change)) => change.describe(),
        Ok(Decoded::LeaseV1(r)) => format!(
            "lease until {}, time base {}, epoch {} (snowid 0.2.0)",
            snowid_core::epoch::format(r.lease_end_unix_ms),
            snowid_core::epoch::format(r.base_unix_ms),
            snowid_core::epoch::format(r.epoch_unix_ms)
        ),
        Err(why) => format!("malformed: {why}"),
    };
    let text = CString::new(text).unwrap_or_default();
    // SAFETY: `buf` is a valid StringInfo; the text is NUL-terminated.
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    let info = info & !(pg_sys::XLR_INFO_MASK as u8);
    match Kind::from_info(info) {
        Some(kind) => kind.name().as_ptr(),
        None if info == LEASE_V1 => c"LEASE (0.2.0)".as_ptr(),
        None => std::ptr::null(),
    }
}
