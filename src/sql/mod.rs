//! Everything SQL users call, one file per family of functions:
//!
//! - [`generate`]: `snowid_next` in its forms, the hot path;
//! - [`decode`]: `snowid_parse`, the parts, `snowid_from_timestamp`, `snowid_shard_for`;
//! - [`text_key`]: the bytes a text key hashes to its shard, whatever the database encoding;
//! - [`trigger`]: `snowid_fill_id`, a key's shard derived from another column;
//! - [`partitions`]: `snowid_partition_ddl`, time partitions of a snowid key;
//! - [`convert`]: `snowid_convert_column`, an existing key turned into a snowid key;
//! - [`operations`]: `snowid_release` and `snowid_take_back`, for superusers;
//! - [`resume`]: `snowid_resume_above` and the cluster-wide resume, `snowid_resume_above_columns`,
//!   for superusers;
//! - [`info`]: `snowid_info()` and `snowid_stats()`;
//! - [`citus`]: `snowid_citus_nodes()`, and `snowid_citus_claim`, which one Citus node asks
//!   another;
//! - [`install`]: what `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE` do beyond creating
//!   functions: create the durable state;
//! - [`old_shapes`]: 0.1.0's shapes of `snowid_info()` and `snowid_stats()`.

pub mod citus;
pub mod convert;
pub mod decode;
pub mod generate;
pub mod info;
pub mod install;
pub mod old_shapes;
pub mod operations;
pub mod partitions;
pub mod resume;
pub mod text_key;
pub mod trigger;
