//! snowid: sharded, time-sorted 64-bit keys for PostgreSQL.
//!
//! Everything about issuing IDs that does not need PostgreSQL lives in the `snowid-core` crate
//! (`core/`). This crate is the glue:
//! - [`gucs`]: the `snowid.*` settings;
//! - [`shmem`]: the shared-memory segment, with its concurrency rules, and how it starts and
//!   stops;
//! - [`wal`]: the lease in the WAL, a custom resource manager;
//! - [`host`]: the protocol's host inside PostgreSQL (clocks, lock, WAL and file, waits, log);
//! - [`errors`]: every error a user can meet;
//! - the SQL functions: [`generate`], [`decode`], [`partitions`], [`trigger`] and [`info`].

use pgrx::prelude::*;

pub mod decode;
pub mod errors;
pub mod generate;
pub mod gucs;
pub mod host;
pub mod info;
pub mod legacy;
pub mod partitions;
pub mod shmem;
pub mod trigger;
pub mod wal;

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
        gucs::init();
        shmem::init();
        wal::register();
        generate::warn_if_exhaustion_is_near(gucs::epoch_unix_ms());
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
