//! Fault points for the tests of the state's creation: a crash or an error at a chosen point, so
//! that each step between the file's extension and the witnesses can be shown to leave a state
//! that the next start decides from again rather than loses.
//!
//! A point fires only when the server was started with the environment variable `SNOWID_FAULT`
//! naming it, as `<point>=crash` (the process kills itself with SIGKILL, as `kill -9` would, and
//! the postmaster restarts every process) or `<point>=error` (an ERROR, 58000). Points:
//! `extended` (the state's file extended, before its WAL record), `logged` (the record
//! inserted, before it is flushed), and `durable` (flushed, before the witnesses are left). The
//! variable is read only on the creation path, never while generating.

use pgrx::prelude::*;

/// A step of the state's creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    Extended,
    Logged,
    Durable,
}

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
