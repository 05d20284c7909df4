//! A message in shared memory: the latest value of a typed record that one process at a time
//! publishes and every process reads, in a slot of a stated capacity.
//!
//! The slot holds the record's JSON, written under a sequence count that is odd while a write is
//! under way: a reader copies the bytes and tries again if the count moved. The bytes are atomics,
//! so a torn read is only a retry. A record that does not fit is never cut: [`Slot::publish`]
//! asks it to [`Message::shrink`] (leaving out what matters least, and saying so in the record)
//! until it fits, and refuses to write one that cannot.
//!
//! Writers must not overlap: a slot has one writer (the check), or its writers take
//! [`Slot::lock`] around a read, a change and a publish.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::{
    fence, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};

/// A record a slot carries.
pub trait Message: Serialize + DeserializeOwned {
    /// Leaves something out, recording in the record what was left out; false once nothing more
    /// can go.
    fn shrink(&mut self) -> bool;
}

/// A slot of `WORDS` 8-byte words.
#[repr(C)]
pub struct Slot<const WORDS: usize> {
    count: AtomicU64,
    len: AtomicUsize,
    writer: AtomicU32,
    words: [AtomicU64; WORDS],
}

/// What a publish did.
#[derive(Debug, PartialEq, Eq)]
pub enum Published {
    Whole,
    /// Shrunk this many times to fit.
    Shrunk(usize),
}

impl<const WORDS: usize> Slot<WORDS> {
    /// How many bytes a record's JSON may take.
    pub const CAPACITY: usize = WORDS * 8;

    /// Publishes a record, shrunk as much as needed to fit; `None` (and nothing written) if it
    /// cannot be made to fit.
    pub fn publish<M: Message>(&self, record: &mut M) -> Option<Published> {
        let mut shrunk = 0;
        loop {
            let bytes = serde_json::to_vec(record).ok()?;
            if bytes.len() <= Self::CAPACITY {
                self.write(&bytes);
                return Some(match shrunk {
                    0 => Published::Whole,
                    n => Published::Shrunk(n),
                });
            }
            if !record.shrink() {
                return None;
            }
            shrunk += 1;
        }
    }

    fn write(&self, bytes: &[u8]) {
        self.count.fetch_add(1, SeqCst);
        for (word, chunk) in self.words.iter().zip(bytes.chunks(8)) {
            let mut padded = [0u8; 8];
            padded[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(padded), Relaxed);
        }
        self.len.store(bytes.len(), Relaxed);
        self.count.fetch_add(1, Release);
    }

    /// The last record published, if any (and if it still decodes as `M`).
    pub fn read<M: Message>(&self) -> Option<M> {
        loop {
            let before = self.count.load(Acquire);
            if before == 0 {
                return None;
            }
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let len = self.len.load(Relaxed).min(Self::CAPACITY);
            let mut bytes = Vec::with_capacity(len.next_multiple_of(8));
            for word in &self.words[..len.div_ceil(8)] {
                bytes.extend_from_slice(&word.load(Relaxed).to_le_bytes());
            }
            fence(Acquire);
            if self.count.load(Relaxed) == before {
                bytes.truncate(len);
                return serde_json::from_slice(&bytes).ok();
            }
        }
    }

    /// Takes the slot's writer lock for a read, a change and a publish by one of several
    /// writers; the guard gives it back. The lock is held for microseconds (no wait, no error
    /// inside), so waiting for it is a spin that yields.
    pub fn lock(&self) -> WriterLock<'_> {
        while self
            .writer
            .compare_exchange_weak(0, 1, Acquire, Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        WriterLock(&self.writer)
    }
}

/// A slot's writer lock, given back when dropped.
pub struct WriterLock<'a>(&'a AtomicU32);

impl Drop for WriterLock<'_> {
    fn drop(&mut self) {
        self.0.store(0, Release);
    }
}
