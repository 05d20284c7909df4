//! snowid: sharded, time-sorted 64-bit keys for PostgreSQL.
//!
//! Everything about issuing IDs that does not need PostgreSQL lives in the `snowid-core` crate
//! (`core/`). This crate is the glue:
//! - [`gucs`]: the `snowid.*` settings;
//! - [`shmem`]: the shared-memory segment, with its concurrency rules, and how it starts;
//! - [`storage`]: the durable state's pages, in the buffer manager;
//! - [`wal`]: the state's changes in the WAL, a custom resource manager, and their replay;
//! - [`host`]: the protocol's host inside PostgreSQL (clocks, durable state, waits, log);
//! - [`counters`]: IDs issued per shard, counted per process off the hot path;
//! - [`errors`]: every error a user can meet;
//! - [`text_key`]: the bytes a text key hashes to its shard, whatever the database encoding;
//! - the SQL functions: [`generate`], [`operations`], [`convert`], [`decode`], [`partitions`],
//!   [`trigger`] and [`info`].

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

pub mod convert;
pub mod counters;
pub mod decode;
pub mod errors;
pub mod generate;
pub mod gucs;
pub mod host;
pub mod info;
pub mod legacy;
pub mod operations;
pub mod partitions;
pub mod shmem;
pub mod storage;
pub mod text_key;
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
        counters::register();
        generate::warn_if_exhaustion_is_near(gucs::epoch_unix_ms());
    }
    // pg_upgrade loads snowid into the new cluster, in binary-upgrade mode, to check and restore
    // the schema: the mark left there fences the new cluster's first normal start.
    // SAFETY: a plain read of a flag set before any library is loaded.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        storage::mark_upgraded();
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
