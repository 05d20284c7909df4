//! What the issuing protocol needs from the world around it, as small traits.
//!
//! Inside PostgreSQL the extension implements them with the system clocks, an LWLock, the WAL
//! and the state file, latch waits, and the server log. The tests implement them with simulated
//! clocks and stores that fail or "crash" on purpose.

use crate::lease::Record;

/// The two clocks, in milliseconds (see [`crate::clock`]).
pub trait Clock {
    /// `CLOCK_MONOTONIC`: never stepped, comparable between processes.
    fn monotonic_ms(&self) -> i64;
    /// `CLOCK_REALTIME`: Unix time, which can be stepped either way.
    fn wall_ms(&self) -> i64;
}

/// Durable storage for the lease.
pub trait LeaseStore {
    /// Why a record could not be made durable.
    type Error;
    /// Held while the lease is being written; dropping it lets another writer in.
    type Guard;

    /// Takes the right to write the lease without waiting, or `None` while another caller holds
    /// it. Callers that cannot take it never block on it: they carry on under the current lease,
    /// or wait interruptibly (see [`Wait`]).
    fn try_lock(&self) -> Option<Self::Guard>;

    /// Makes `record` durable before returning. Inside PostgreSQL: a WAL record, flushed, then the
    /// state file, fsynced. Only after this returns may the lease it describes be used.
    fn persist(&self, record: &Record) -> Result<(), Self::Error>;
}

/// A wait was ended early, by a cancel or a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted;

/// Waiting for time to pass or for another caller to finish.
pub trait Wait {
    /// Sleeps for about `ms` milliseconds (at least 1). Inside PostgreSQL this is a latch wait
    /// that a query cancel or `statement_timeout` ends by raising an error; other hosts return
    /// [`Interrupted`] instead.
    fn wait(&self, ms: u64) -> Result<(), Interrupted>;
}

/// Something an operator should hear about. Reported at most once a minute per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The wall clock stepped back by `ms`; the time base is now `behind_ms` ahead of it.
    ClockSteppedBack { ms: i64, behind_ms: i64 },
    /// The time base is `behind_ms` ahead of the wall clock, more than `snowid.max_lead`.
    RunningAhead { behind_ms: i64 },
}

/// Where [`Event`]s go: inside PostgreSQL, the server log only, never the client.
pub trait Report {
    fn report(&self, event: Event);
}
