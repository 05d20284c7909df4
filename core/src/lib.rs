//! snowid's core: everything about issuing IDs that does not need PostgreSQL.
//!
//! - [`layout`]: the 41/13/10 bit layout, as checked arithmetic.
//! - [`epoch`]: the epoch as text and numbers (an ISO 8601 parser and formatter).
//! - [`clock`]: the two clocks, and how to sample them together.
//! - [`time_base`]: the wall clock, except that it never steps backwards.
//! - [`shard_state`]: one shard's 64-bit stamp, advanced lock-free.
//! - [`shard_set`]: the shards a server owns.
//! - [`shard_hash`]: the stable hash from a key to a shard.
//! - [`mask`]: public IDs: a keyed, reversible mask of the non-negative `bigint`s (FF1 of NIST
//!   SP 800-38G) and its text form (Crockford's base32).
//! - [`citus`]: the shards of each Citus group, and a node's check of its shards against the
//!   other nodes'.
//! - [`durable`]: the durable state (lease, time-base floor, earliest epoch, released shards,
//!   fence), the changes that make it up, and their byte forms in WAL records and pages.
//! - [`release_records`]: the records of the released shards kept beside the durable state (the
//!   cluster's witness, each database's table): what each change writes, in which order, so
//!   that no record ever says less than the state, and what a fence lift releases again.
//! - [`release_plan`]: one plan per change of the released shards (a release, a take-back, a
//!   fence lift, an install's record): the list the records get, the order of the steps, and
//!   what each failure undoes, for an error, a cancel and a FATAL; carried out here, generic over
//!   the host's records.
//! - [`resume_above`]: the ID a resume rises above, from the keys the databases hold, and how far
//!   ahead of the clock a key may be dated before a superuser must accept it.
//! - [`startup`]: start-up as one plan: what the durable state is when a server first needs it,
//!   at install, and while `pg_upgrade` brings databases in (loaded, created fresh, or fenced, and
//!   why), what must be written first (a creation, a promotion), and whether the server
//!   generates. Every host, the server's and the tests', carries out that same plan.
//! - [`generator`]: the issuing protocol: the fast path, and the slow one that loads the durable
//!   state, renews the lease, releases, resumes and refuses. What differs inside PostgreSQL
//!   (clocks, durable storage, waiting, logging) sits behind the small traits in [`host`], and
//!   the protocol is generic over them, so it compiles to straight-line code with no dynamic
//!   dispatch.
//!
//! The extension crate places [`generator::Shared`] in PostgreSQL's shared memory and supplies
//! the traits; everything here is tested without a server.

pub mod citus;
pub mod clock;
pub mod durable;
pub mod epoch;
pub mod generator;
pub mod host;
pub mod layout;
pub mod mask;
pub mod release_plan;
pub mod release_records;
pub mod resume_above;
pub mod shard_hash;
pub mod shard_set;
pub mod shard_state;
#[cfg(test)]
mod simulated_host;
pub mod startup;
mod sync;
pub mod time_base;
