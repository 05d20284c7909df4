//! Hooks for the tests, compiled only into test builds (the cargo feature `test_hooks`, which
//! `scripts/test` turns on for the library it installs): what users install has none, as
//! PostgreSQL keeps its injection points behind `--enable-injection-points`.
//!
//! - Fault points in the state's creation: a crash or an error at a chosen point, so that each
//!   step between the file's extension and the witnesses can be shown to leave a state that the
//!   next start decides from again rather than loses. A point fires only when the server was
//!   started with the environment variable `SNOWID_FAULT` naming it, as `<point>=crash` (the
//!   process kills itself with SIGKILL, as `kill -9` would, and the postmaster restarts every
//!   process) or `<point>=error` (an ERROR, 58000). Points: `extended` (the state's file
//!   extended, before its WAL record), `logged` (the record inserted, before it is flushed), and
//!   `durable` (flushed, before the witnesses are left). The variable is read only on the
//!   creation path, never while generating.
//! - `snowid_test_wal_record(info int, data bytea)`: writes one record of snowid's resource
//!   manager as given, flushed, and returns its end: WAL of another version (0.2.0's leases)
//!   for the tests of its replay. Not in the extension's script: a test creates it with
//!   `CREATE FUNCTION ... LANGUAGE c AS 'snowid', 'snowid_test_wal_record_wrapper'`.
//! - `snowid_test_spy_am`: a table access method handler, heap's own but for a line in the server
//!   log each time a scan or an index fetch of a table begins, naming the table, the role it
//!   runs as, and whether it runs in a security-restricted operation: what lets a test see whose
//!   identity snowid reads a table with on the access method's path, where no SQL of the owner's
//!   runs. A test creates it with `CREATE FUNCTION ... (internal) RETURNS table_am_handler
//!   LANGUAGE c AS 'snowid', 'snowid_test_spy_am'` and `CREATE ACCESS METHOD ... TYPE TABLE`.

/// A step of the state's creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Extended,
    Logged,
    Durable,
}

/// Crashes or raises an error here if `SNOWID_FAULT` asks for it (test builds only).
#[cfg(not(feature = "test_hooks"))]
#[inline(always)]
pub fn at(_point: Point) {}

#[cfg(feature = "test_hooks")]
pub use hooks::at;

#[cfg(feature = "test_hooks")]
mod hooks {
    use super::Point;
    use pgrx::prelude::*;

    impl Point {
        fn name(self) -> &'static str {
            match self {
                Point::Extended => "extended",
                Point::Logged => "logged",
                Point::Durable => "durable",
            }
        }
    }

    /// Crashes or raises an error here if `SNOWID_FAULT` asks for it.
    pub fn at(point: Point) {
        let Ok(wanted) = std::env::var("SNOWID_FAULT") else {
            return;
        };
        match wanted
            .strip_prefix(point.name())
            .and_then(|a| a.strip_prefix('='))
        {
            Some("crash") => {
                log!("snowid fault point \"{}\": crashing", point.name());
                // SAFETY: a plain signal to this very process, which then ends at once.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            Some("error") => ereport!(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
                format!("snowid fault point \"{}\"", point.name())
            ),
            _ => {}
        }
    }

    /// Heap's table access method, with the spy's callbacks in place of two of heap's.
    static mut SPY: Option<pgrx::pg_sys::TableAmRoutine> = None;

    /// Logs who begins to read `relation`, and how.
    ///
    /// # Safety
    ///
    /// `relation` is an open relation.
    unsafe fn spy_report(what: &str, relation: pgrx::pg_sys::Relation) {
        // SAFETY: guaranteed by the caller; the role's name is looked up in the syscache.
        unsafe {
            let user = pgrx::pg_sys::GetUserId();
            let name = pgrx::pg_sys::GetUserNameFromId(user, true);
            let name = match name.is_null() {
                true => format!("role {user:?}"),
                false => std::ffi::CStr::from_ptr(name)
                    .to_string_lossy()
                    .into_owned(),
            };
            let table = std::ffi::CStr::from_ptr((*(*relation).rd_rel).relname.data.as_ptr())
                .to_string_lossy()
                .into_owned();
            let restricted = pgrx::pg_sys::InSecurityRestrictedOperation();
            log!(
                "snowid test access method: {what} of {table} as {name}{}",
                match restricted {
                    true => ", in a security-restricted operation",
                    false => "",
                }
            );
        }
    }

    /// Heap's own routine.
    fn heap() -> &'static pgrx::pg_sys::TableAmRoutine {
        // SAFETY: heap's routine is a static of PostgreSQL's.
        unsafe { &*pgrx::pg_sys::GetHeapamTableAmRoutine() }
    }

    unsafe extern "C-unwind" fn spy_scan_begin(
        relation: pgrx::pg_sys::Relation,
        snapshot: pgrx::pg_sys::Snapshot,
        nkeys: std::ffi::c_int,
        key: *mut pgrx::pg_sys::ScanKeyData,
        parallel: pgrx::pg_sys::ParallelTableScanDesc,
        flags: u32,
    ) -> pgrx::pg_sys::TableScanDesc {
        // SAFETY: PostgreSQL's arguments, passed on to heap's own callback.
        unsafe {
            spy_report("a scan", relation);
            (heap().scan_begin.unwrap_unchecked())(relation, snapshot, nkeys, key, parallel, flags)
        }
    }

    /// Heap's index build, which insists on heap's own routine: run with it in place.
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C-unwind" fn spy_index_build_range_scan(
        table: pgrx::pg_sys::Relation,
        index: pgrx::pg_sys::Relation,
        info: *mut pgrx::pg_sys::IndexInfo,
        allow_sync: bool,
        any_visible: bool,
        progress: bool,
        start: pgrx::pg_sys::BlockNumber,
        blocks: pgrx::pg_sys::BlockNumber,
        callback: pgrx::pg_sys::IndexBuildCallback,
        state: *mut std::ffi::c_void,
        scan: pgrx::pg_sys::TableScanDesc,
    ) -> f64 {
        /// Puts the spy's routine back, also when an error unwinds.
        struct Restore(pgrx::pg_sys::Relation, *const pgrx::pg_sys::TableAmRoutine);
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: the relation is open for the whole call.
                unsafe { (*self.0).rd_tableam = self.1 };
            }
        }
        // SAFETY: PostgreSQL's arguments, passed on to heap's own callback, with heap's routine
        // in the relation's cache entry for the call.
        unsafe {
            let _restore = Restore(table, (*table).rd_tableam);
            (*table).rd_tableam = heap();
            (heap().index_build_range_scan.unwrap_unchecked())(
                table,
                index,
                info,
                allow_sync,
                any_visible,
                progress,
                start,
                blocks,
                callback,
                state,
                scan,
            )
        }
    }

    #[cfg(not(feature = "pg19"))]
    unsafe extern "C-unwind" fn spy_index_fetch_begin(
        relation: pgrx::pg_sys::Relation,
    ) -> *mut pgrx::pg_sys::IndexFetchTableData {
        // SAFETY: as above.
        unsafe {
            spy_report("an index fetch", relation);
            (heap().index_fetch_begin.unwrap_unchecked())(relation)
        }
    }

    #[cfg(feature = "pg19")]
    unsafe extern "C-unwind" fn spy_index_fetch_begin(
        relation: pgrx::pg_sys::Relation,
        flags: u32,
    ) -> *mut pgrx::pg_sys::IndexFetchTableData {
        // SAFETY: as above.
        unsafe {
            spy_report("an index fetch", relation);
            (heap().index_fetch_begin.unwrap_unchecked())(relation, flags)
        }
    }

    v1_function_info!(pg_finfo_snowid_test_spy_am);

    /// The spy's table access method handler.
    ///
    /// # Safety
    ///
    /// Called by PostgreSQL's function manager, as a table access method handler.
    #[unsafe(no_mangle)]
    pub unsafe extern "C-unwind" fn snowid_test_spy_am(
        _fcinfo: pgrx::pg_sys::FunctionCallInfo,
    ) -> pgrx::pg_sys::Datum {
        // SAFETY: one process, one thread: the routine is filled once, from heap's, and never
        // changed after; PostgreSQL keeps the pointer for the relation's life.
        unsafe {
            let spy = &mut *std::ptr::addr_of_mut!(SPY);
            let routine = spy.get_or_insert_with(|| {
                let mut routine = *heap();
                routine.scan_begin = Some(spy_scan_begin);
                routine.index_fetch_begin = Some(spy_index_fetch_begin);
                routine.index_build_range_scan = Some(spy_index_build_range_scan);
                routine
            });
            pgrx::pg_sys::Datum::from(routine as *mut pgrx::pg_sys::TableAmRoutine)
        }
    }

    /// Writes one record of snowid's resource manager, as given, and flushes it.
    #[pg_extern(volatile, strict, sql = false)]
    fn snowid_test_wal_record(info: i32, data: &[u8]) -> i64 {
        let info = u8::try_from(info).unwrap_or_else(|_| {
            crate::errors::bad_argument(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("the info byte {info} is not 0 to 255"),
                None,
            )
        });
        // SAFETY: the standard sequence for a record with main data and no block; `data`
        // outlives the insert, which copies it.
        unsafe {
            pgrx::pg_sys::XLogBeginInsert();
            pgrx::pg_sys::XLogRegisterData(data.as_ptr() as _, data.len() as _);
            let lsn = pgrx::pg_sys::XLogInsert(snowid_core::durable::RMGR_ID as _, info);
            pgrx::pg_sys::XLogFlush(lsn);
            lsn as i64
        }
    }
}
