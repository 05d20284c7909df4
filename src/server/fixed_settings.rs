//! The built-in settings snowid's background workers fix in the database they connect to,
//! whatever the configuration, that database's owner or a role set: each would change what their
//! queries do (`role`, `default_transaction_read_only`, `exit_on_error`, the timeouts,
//! `search_path`, string literals, a damaged page read as zeros, parallel workers that cannot
//! connect where the worker can) or what they say. The databases' worker (see
//! [`super::databases`]) and the Citus checker (see [`super::citus`]) both set every one of them
//! as an override, which outranks every other source, and each adds its own bound on lock waits.
//! (`session_authorization` is put back by hand: it cannot be set outside a transaction.)

use pgrx::pg_sys;
use std::ffi::CStr;

/// The settings fixed, with their values.
pub const FIXED_SETTINGS: &[(&CStr, &CStr)] = &[
    (c"role", c"none"),
    (c"search_path", c"pg_catalog, pg_temp"),
    (c"default_transaction_read_only", c"off"),
    (c"default_transaction_isolation", c"read committed"),
    (c"default_transaction_deferrable", c"off"),
    (c"exit_on_error", c"off"),
    (c"statement_timeout", c"0"),
    (c"idle_in_transaction_session_timeout", c"0"),
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    (c"transaction_timeout", c"0"),
    (c"standard_conforming_strings", c"on"),
    (c"transform_null_equals", c"off"),
    (c"quote_all_identifiers", c"off"),
    (c"session_replication_role", c"origin"),
    (c"synchronous_commit", c"local"),
    (c"client_min_messages", c"error"),
    (c"jit", c"off"),
    (c"zero_damaged_pages", c"off"),
    (c"ignore_checksum_failure", c"off"),
    (c"max_parallel_workers_per_gather", c"0"),
    #[cfg(feature = "pg15")]
    (c"force_parallel_mode", c"off"),
    #[cfg(not(feature = "pg15"))]
    (c"debug_parallel_query", c"off"),
];

/// Sets a built-in setting as an override, which outranks every other source.
pub fn set_override(name: &CStr, value: &CStr) {
    // SAFETY: a setting a superuser may set; NUL-terminated strings.
    unsafe {
        pg_sys::SetConfigOption(
            name.as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        )
    };
}
