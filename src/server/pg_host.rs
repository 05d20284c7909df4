//! The issuing protocol's host inside PostgreSQL: the machine's clocks, the durable state (its
//! start-up, its pages and the WAL), latch waits and the claim's condition variable, and the
//! server log.

use crate::server::shared_memory;
use crate::server::state::{durability, startup};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::durable::{Change, Unavailable};
use snowid_core::host::{Clock, DurableStore, Event, Interrupted, Report, Wait};
use snowid_core::startup::{Occasion, Plan, Reading};

/// The host for calls in this backend. It has no state; the protocol is generic over it, so
/// every method below compiles into the caller.
pub struct PgHost;

impl Clock for PgHost {
    #[inline]
    fn monotonic_ms(&self) -> i64 {
        SystemClock.monotonic_ms()
    }

    #[inline]
    fn wall_ms(&self) -> i64 {
        SystemClock.wall_ms()
    }
}

impl DurableStore for PgHost {
    type Error = Unavailable;

    fn claimer(&self) -> u32 {
        shared_memory::claimer()
    }

    /// Start-up, carried out on the state's pages ([`startup::start`]).
    fn start(
        &self,
        occasion: Occasion,
        plan: &dyn Fn(Reading<'_>) -> Plan,
    ) -> Result<Plan, Unavailable> {
        startup::start(occasion, plan)
    }

    /// The change's WAL record with its pages, flushed, in force, and confirmed by the
    /// synchronous standbys if there are any.
    fn persist(&self, change: &Change, in_force: &mut dyn FnMut()) -> Result<(), Unavailable> {
        durability::persist(change, in_force)
    }
}

impl Wait for PgHost {
    /// Sleeps on the process latch, honouring query cancel, `statement_timeout` and postmaster
    /// death: an interrupt raises its error from here and never returns.
    fn wait(&self, ms: u64) -> Result<(), Interrupted> {
        let flags = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
        // SAFETY: MyLatch is set up for every backend and worker before it runs SQL functions.
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                flags as i32,
                ms.clamp(1, 1000) as std::ffi::c_long,
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        pg_sys::check_for_interrupts!();
        Ok(())
    }

    /// Sleeps on the claim's condition variable in shared memory.
    fn wait_for_claim(&self, ms: u64) -> Result<(), Interrupted> {
        shared_memory::sleep_for_claim(ms);
        Ok(())
    }

    fn claim_given_back(&self) {
        shared_memory::wake_claim_waiters();
    }
}

impl Report for PgHost {
    /// Server log only: the client whose call noticed the clock has nothing to do about it.
    fn report(&self, event: Event) {
        let message = match event {
            Event::ClockSteppedBack { ms, behind_ms } => format!(
                "snowid saw the system clock step back by {ms} ms; IDs continue from the time \
                 base, which is now {behind_ms} ms ahead of the system clock"
            ),
            Event::RunningAhead { behind_ms } => format!(
                "snowid time base is {behind_ms} ms ahead of the system clock, more than \
                 snowid.max_lead; IDs carry timestamps from the time base until the clock \
                 catches up"
            ),
            Event::ForwardStepFollowed {
                ms,
                confirmed_after_ms,
            } => format!(
                "snowid saw the system clock step forward by {ms} ms and stay there for \
                 {confirmed_after_ms} ms; IDs now follow it"
            ),
            Event::ForwardGlitchIgnored { ms, lasted_ms } => format!(
                "snowid ignored a forward jump of the system clock by {ms} ms that reverted after \
                 {lasted_ms} ms; no ID carries its time"
            ),
        };
        ereport!(
            PgLogLevel::LOG_SERVER_ONLY,
            PgSqlErrorCode::ERRCODE_WARNING,
            message
        );
    }
}
