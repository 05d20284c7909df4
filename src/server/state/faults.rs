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
