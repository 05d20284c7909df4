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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// A record that leaves out its last item to fit, and counts what it left out.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Items {
        items: Vec<String>,
        left_out: usize,
    }

    impl Message for Items {
        fn shrink(&mut self) -> bool {
            self.items.pop().is_some() && {
                self.left_out += 1;
                true
            }
        }
    }

    fn items(n: usize) -> Items {
        Items {
            items: (0..n).map(|i| format!("node {i:04}")).collect(),
            left_out: 0,
        }
    }

    #[test]
    fn a_record_too_big_for_its_slot_is_shrunk_and_says_what_it_left_out_never_cut() {
        // SAFETY: all zero is an empty slot, as shared memory starts.
        let slot: Box<Slot<16>> = Box::new(unsafe { std::mem::zeroed() });
        assert_eq!(slot.read::<Items>(), None, "nothing published yet");
        let mut small = items(3);
        assert_eq!(slot.publish(&mut small), Some(Published::Whole));
        assert_eq!(slot.read::<Items>(), Some(items(3)));
        // 128 bytes hold a few of a hundred items: the rest are left out, and counted.
        let mut big = items(100);
        let Some(Published::Shrunk(n)) = slot.publish(&mut big) else {
            panic!("a record over the capacity is shrunk");
        };
        let read: Items = slot.read().expect("what was published decodes");
        assert_eq!(read.left_out, n);
        assert_eq!(read.items.len() + read.left_out, 100);
        assert!(serde_json::to_vec(&read).unwrap().len() <= Slot::<16>::CAPACITY);
        // One that cannot shrink enough is not written: the last one stays.
        assert_eq!(slot.publish(&mut Fixed("x".repeat(1000))), None);
        assert_eq!(slot.read::<Items>(), Some(read));
    }

    /// A record that cannot leave anything out.
    #[derive(Serialize, Deserialize)]
    struct Fixed(String);

    impl Message for Fixed {
        fn shrink(&mut self) -> bool {
            false
        }
    }
}
