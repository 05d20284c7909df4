//! What runs inside the server, beneath the SQL functions: the settings, the shared-memory
//! segment, the per-process counts, the protocol's host, and the durable state.
//!
//! - [`settings`]: the `snowid.*` settings;
//! - [`mask_key`]: the public IDs' keys, read from their file at start and reload, each
//!   database's resolved once per reload;
//! - [`mask_log`]: no statement that names a mask key reaches the log;
//! - [`citus`]: on Citus, the shards this node may generate for, checked against the other
//!   nodes' off the hot path;
//! - [`shared_memory`]: the segment, with its concurrency rules, and how it starts;
//! - [`counters`]: IDs issued per shard, counted per process off the hot path;
//! - [`pg_host`]: the issuing protocol's host (clocks, durable state, waits, log);
//! - [`issuing`]: the protocol bound to that host and the settings, and its refusals as errors;
//! - [`pg_upgrade`]: the state fenced while `pg_upgrade` brings databases with snowid in;
//! - [`databases`]: what every database of the cluster holds (its snowid keys, its record of the
//!   released shards), read or written by a background worker in each;
//! - [`fixed_settings`]: the built-in settings snowid's background workers fix, whatever a
//!   database or role sets;
//! - [`releases`]: a release, a take-back and a fence lift, carried out in the durable state,
//!   the cluster's witness and every database's record as the core plans them, and an install's
//!   record at its commit;
//! - [`cluster_lock`]: the one lock that orders those changes, installs and database copies;
//! - [`resumes`]: the resumes above a number or above every database's keys;
//! - [`utility_hook`]: what snowid does in PostgreSQL's statements (`pg_upgrade`'s restore,
//!   `CREATE DATABASE`'s copy of a template);
//! - [`waits`]: every wait on a lock another session holds, and its one bound;
//! - [`state`]: the durable state's pages, WAL records and start-up decision.

pub mod citus;
pub mod cluster_lock;
pub mod counters;
pub mod databases;
pub mod fixed_settings;
pub mod issuing;
pub mod mask_key;
pub mod mask_log;
pub mod pg_host;
pub mod pg_upgrade;
pub mod releases;
pub mod resumes;
pub mod settings;
pub mod shared_memory;
pub mod state;
pub mod utility_hook;
pub mod waits;
