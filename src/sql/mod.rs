//! Everything SQL users call, one file per family of functions:
//!
//! - [`generate`]: `snowid_next` in its forms, the hot path;
//! - [`decode`]: `snowid_parse`, the parts, `snowid_from_timestamp`, `snowid_shard_for`;
//! - [`text_key`]: the bytes a text key hashes to its shard, whatever the database encoding;
//! - [`mask`]: public IDs: `snowid_mask`, `snowid_unmask` and their text forms;
//! - [`trigger`]: `snowid_fill_id`, a key's shard derived from another column;
//! - [`partitions`]: `snowid_partition_ddl`, time partitions of a snowid key;
//! - [`convert`]: `snowid_convert_column`, an existing key turned into a snowid key;
//! - [`operations`]: `snowid_release` and `snowid_take_back`, for superusers;
//! - [`resume`]: `snowid_resume_above` and the cluster-wide resume, `snowid_resume_above_columns`,
//!   for superusers;
//! - [`info`]: `snowid_info()` and `snowid_stats()`;
//! - [`citus`]: `snowid_citus_nodes()`, and the IDs this server issued outside its Citus claim,
//!   which the check reads;
//! - [`install`]: what `CREATE EXTENSION` and `ALTER EXTENSION ... UPDATE` do beyond creating
//!   functions: create the durable state, and have the database's record of the released shards
//!   written at commit;
//! - [`old_shapes`]: earlier versions' shapes of functions whose shape changed (`snowid_info()`,
//!   `snowid_stats()`, `snowid_next(int)`'s old symbol, the resumes), for their scripts.

pub mod citus;
pub mod convert;
pub mod decode;
pub mod generate;
pub mod info;
pub mod install;
pub mod mask;
pub mod old_shapes;
pub mod operations;
pub mod partitions;
pub mod resume;
pub mod text_key;
pub mod trigger;
