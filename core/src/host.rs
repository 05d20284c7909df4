//! What the issuing protocol needs from the world around it, as small traits.
//!
//! Inside PostgreSQL the extension implements them with the system clocks, the buffer manager
//! and the WAL, latch waits, and the server log. The tests implement them with simulated
//! clocks and stores that fail or "crash" on purpose.

use crate::durable::Change;
use crate::startup::{Occasion, Plan, Reading};

/// The two clocks, in milliseconds (see [`crate::clock`]).
pub trait Clock {
    /// `CLOCK_MONOTONIC`: never stepped, comparable between processes.
    fn monotonic_ms(&self) -> i64;
    /// `CLOCK_REALTIME`: Unix time, which can be stepped either way.
    fn wall_ms(&self) -> i64;
}

/// Where the durable state lives (see [`crate::durable`]). Inside PostgreSQL: pages in the
/// buffer manager, changed by WAL records; in the tests, a simulated disk.
pub trait DurableStore {
    /// Why the state could not be read or changed.
    type Error;

    /// This process, as holder of the writer's claim: a number other than 0 that no other live
    /// process uses.
    fn claimer(&self) -> u32;

    /// Start-up (see [`crate::startup`]): reads what the state's pages hold, the witnesses where
    /// they hold no state, and the history the store is on; lets `plan` decide; writes, durably,
    /// what the plan says; and returns the plan. Where the pages hold no state, the reading, the
    /// plan and the write are one step, which no other process interleaves, so that the state is
    /// created once.
    fn start(
        &self,
        occasion: Occasion,
        plan: &dyn Fn(Reading<'_>) -> Plan,
    ) -> Result<Plan, Self::Error>;

    /// Makes a change durable, in the order a commit is made durable: its record is written and
    /// flushed here, then `in_force` runs (from then on the change holds on this server, whatever
    /// follows), then the host waits until the synchronous standbys have it, if there are any.
    /// An error before `in_force` ran means the change was not made; an error after it (a
    /// cancelled wait for the standbys) means it holds here, and what depends on the standbys
    /// having it (a lease that covers IDs handed out) must not be used.
    fn persist(&self, change: &Change, in_force: &mut dyn FnMut()) -> Result<(), Self::Error>;
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

    /// Sleeps until the writer's claim is given back ([`Wait::claim_given_back`]), or about `ms`
    /// milliseconds at most. Inside PostgreSQL this is a condition variable in shared memory.
    fn wait_for_claim(&self, ms: u64) -> Result<(), Interrupted> {
        self.wait(ms)
    }

    /// Wakes every caller sleeping in [`Wait::wait_for_claim`]: the claim was just given back.
    fn claim_given_back(&self) {}
}

/// Something an operator should hear about. Reported at most once a minute per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The wall clock stepped back by `ms`; the time base is now `behind_ms` ahead of it.
    ClockSteppedBack { ms: i64, behind_ms: i64 },
    /// The time base is `behind_ms` ahead of the wall clock, more than `snowid.max_lead`.
    RunningAhead { behind_ms: i64 },
    /// The wall clock stepped forward by `ms` and stayed there for `confirmed_after_ms`: the time
    /// base now follows it.
    ForwardStepFollowed { ms: i64, confirmed_after_ms: i64 },
    /// The wall clock jumped forward by up to `ms` and came back within `lasted_ms`: the time
    /// base never followed it.
    ForwardGlitchIgnored { ms: i64, lasted_ms: i64 },
}

/// Where [`Event`]s go: inside PostgreSQL, the server log only, never the client.
pub trait Report {
    fn report(&self, event: Event);
}
