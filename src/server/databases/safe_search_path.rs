//! `search_path` set to `pg_catalog, pg_temp` for a while, as PostgreSQL's maintenance commands
//! and a function's `SET` clause set it: what every query snowid runs in a database runs under.

use pgrx::pg_sys;

/// `search_path` set to `pg_catalog, pg_temp` until dropped (or until the transaction ends), as
/// a function's `SET` clause would do it.
pub(crate) struct SafeSearchPath(std::ffi::c_int);

impl SafeSearchPath {
    pub(crate) fn set() -> SafeSearchPath {
        // SAFETY: the sequence PostgreSQL's own code uses for a temporary setting; the strings
        // are NUL-terminated.
        unsafe {
            let level = pg_sys::NewGUCNestLevel();
            pg_sys::set_config_option(
                c"search_path".as_ptr(),
                c"pg_catalog, pg_temp".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
            SafeSearchPath(level)
        }
    }
}

impl Drop for SafeSearchPath {
    fn drop(&mut self) {
        // SAFETY: undoes the nest level `set` opened (an error's abort would undo it too).
        unsafe { pg_sys::AtEOXact_GUC(true, self.0) };
    }
}
