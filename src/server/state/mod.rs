//! snowid's durable state inside PostgreSQL: the pages that hold it, the WAL records that change
//! it, when a change may be used, and the one start-up decision.
//!
//! - [`pages`]: the relation `global/9128`, in the buffer manager;
//! - [`wal_records`]: snowid's WAL resource manager, its records and their replay;
//! - [`durability`]: one change made durable ([`durability::persist`]), used only once flushed,
//!   and confirmed by synchronous standbys;
//! - [`startup`]: start-up carried out: what the state is when a server first needs it, at
//!   install, and while `pg_upgrade` brings databases in, as `snowid_core::startup` plans it;
//! - [`witness`]: the cluster's and each database's witness that the state existed;
//! - [`old_files`]: files earlier versions left, which count as witnesses;
//! - [`faults`]: fault points in the state's creation, and a WAL writer, for the tests (test
//!   builds only);
//!
//! Nothing here reads the settings or the rest of the runtime: callers pass what it needs.

pub mod durability;
pub mod faults;
pub mod old_files;
pub mod pages;
pub mod startup;
pub mod wal_records;
pub mod witness;
