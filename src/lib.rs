//! snowid: sharded, time-sorted 64-bit keys for PostgreSQL.
//!
//! The pure core has no PostgreSQL in it: [`layout`] (the bits), [`epoch`] (time as text and
//! numbers), [`time_base`] (a clock that never steps back), [`shard_state`] (the per-shard
//! lock-free step), [`lease`] (the persisted high-water mark) and [`shard_set`] (the shards a
//! server owns). The rest is thin glue: [`shmem`], [`gucs`], [`clock`], [`errors`], and the SQL
//! functions in [`generate`], [`decode`] and [`info`].

use pgrx::prelude::*;

pub mod clock;
pub mod decode;
pub mod epoch;
pub mod errors;
pub mod generate;
pub mod gucs;
pub mod info;
pub mod layout;
pub mod lease;
pub mod shard_set;
pub mod shard_state;
pub mod shmem;
pub mod time_base;

::pgrx::pg_module_magic!(name, version);

extension_sql!(
    "COMMENT ON EXTENSION snowid IS 'Sharded, time-sorted 64-bit keys, generated lock-free in shared memory';",
    name = "extension_comment"
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // Settings and shared memory can only be set up while the postmaster loads preloaded
    // libraries. Loaded later (by CREATE EXTENSION, say), snowid decodes but does not generate.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        gucs::init();
        shmem::init();
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
