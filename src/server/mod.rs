//! What runs inside the server, beneath the SQL functions: the settings, the shared-memory
//! segment, the per-process counts, the protocol's host, and the durable state.
//!
//! - [`settings`]: the `snowid.*` settings;
//! - [`citus`]: on Citus, the shards this node may generate for, checked against the other
//!   nodes' off the hot path;
//! - [`shared_memory`]: the segment, with its concurrency rules, and how it starts;
//! - [`counters`]: IDs issued per shard, counted per process off the hot path;
//! - [`pg_host`]: the issuing protocol's host (clocks, durable state, waits, log);
//! - [`issuing`]: the protocol bound to that host and the settings, and its refusals as errors;
//! - [`pg_upgrade`]: the state fenced while `pg_upgrade` brings databases with snowid in;
//! - [`databases`]: what every database of the cluster holds (its snowid keys, its record of the
//!   released shards), read or written by a background worker in each;
//! - [`state`]: the durable state's pages, WAL records and start-up decision.

pub mod citus;
pub mod counters;
pub mod databases;
pub mod issuing;
pub mod pg_host;
pub mod pg_upgrade;
pub mod settings;
pub mod shared_memory;
pub mod state;
