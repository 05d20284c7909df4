//! The atomics the shared state is made of: the standard ones, or loom's under `--cfg loom`, so
//! that the model-checked tests (`tests/loom.rs`) explore every interleaving of the real code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8};
