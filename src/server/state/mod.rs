//! snowid's durable state inside PostgreSQL: the pages that hold it, the WAL records that change
//! it, when a change may be used, and the one start-up decision.
//!
//! - [`pages`]: the relation `global/9128`, in the buffer manager;
//! - [`wal_records`]: snowid's WAL resource manager, its records and their replay;
//! - [`durability`]: a change is used only once flushed, and confirmed by synchronous standbys;
//! - [`startup`]: what the state is when a server first needs it, and an old version's file;
//! - [`witness`]: in each database where snowid was installed, a witness that the state existed.
//!
//! Nothing here reads the settings or the rest of the runtime: callers pass what it needs.

pub mod durability;
pub mod pages;
pub mod startup;
pub mod wal_records;
pub mod witness;
