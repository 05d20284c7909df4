//! snowid: sharded, time-sorted 64-bit keys for PostgreSQL.
//!
//! Everything about issuing IDs that does not need PostgreSQL lives in the `snowid-core` crate
//! (`core/`). This crate is the glue, in layers whose imports only point down:
//! - [`sql`]: every function SQL users call, one module per family (its module lists them);
//! - [`server`]: what runs inside the server: the settings, the shared-memory segment, the
//!   per-process counts, the protocol's host, the cluster's databases as the resumes and the
//!   records of releases need them, the releases and resumes themselves, the hooks (utility,
//!   `pg_upgrade`, the log's statements that name a mask key) (its module lists them);
//! - [`server::state`]: the durable state: its pages, its WAL records, the witnesses, and
//!   start-up carried out as the core plans it ([`server::state::startup`]);
//! - [`errors`]: every error a user can meet, at the bottom: it imports nothing of the above.

use pgrx::prelude::*;

/// Declares version-1 C functions to PostgreSQL's function manager, for the functions written
/// out by hand (`extern "C-unwind" fn name(fcinfo) -> Datum` with `pg_finfo_name`).
macro_rules! v1_function_info {
    ($($finfo:ident),*) => {$(
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static pgrx::pg_sys::Pg_finfo_record {
            const V1: pgrx::pg_sys::Pg_finfo_record = pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    )*};
}

pub mod errors;
pub mod server;
pub mod sql;

use server::state::wal_records;
use server::{citus, counters, mask_log, pg_upgrade, settings, shared_memory, utility_hook};

::pgrx::pg_module_magic!(name, version);

extension_sql!(
    "COMMENT ON EXTENSION snowid IS 'Sharded, time-sorted 64-bit keys in Instagram''s 41/13/10 layout, generated lock-free in shared memory';",
    name = "extension_comment"
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Settings, shared memory and the WAL resource manager can only be set up while the
    // postmaster loads preloaded libraries. Loaded later (by CREATE EXTENSION, say), snowid
    // decodes but does not generate.
    // SAFETY: a plain read of a flag PostgreSQL sets while it loads preloaded libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        settings::init();
        shared_memory::init();
        citus::init(sql::citus::OWN_IDS);
        wal_records::register();
        counters::register();
        utility_hook::install();
        mask_log::install();
        settings::warn_if_exhaustion_is_near(settings::epoch_unix_ms());
    } else {
        // pg_upgrade loads snowid into the new cluster to check its libraries: the state is
        // fenced there before the upgraded databases come in (see server::pg_upgrade).
        pg_upgrade::loaded_into_backend();
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries='snowid'"]
    }
}
