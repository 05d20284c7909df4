//! The issuing protocol's host inside PostgreSQL: the machine's clocks, the durable state in its
//! pages and the WAL, latch waits, and the server log.

use crate::{shmem, storage};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::durable::{Change, Damage, DurableState, Fence, Header};
use snowid_core::host::{Clock, DurableStore, Event, Interrupted, Report, Wait};

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

/// Why the durable state could not be read or changed.
#[derive(Debug)]
pub enum Unavailable {
    /// Its pages are damaged (found so while changing them).
    Damaged(Damage),
    /// The change's record is durable here, but the wait for the synchronous standbys to confirm
    /// it was cancelled, so nothing that depends on it may be used.
    NotReplicated,
}

impl DurableStore for PgHost {
    type Error = Unavailable;

    fn claimer(&self) -> u32 {
        shmem::claimer()
    }

    /// The state from its pages. The first time (a new cluster, one carried over from snowid
    /// 0.2.0, one made by `pg_upgrade`) or over damaged pages, it is created first: fenced,
    /// if the cluster was upgraded, the old state file said so, or the pages were damaged.
    fn load(&self, epoch_unix_ms: i64) -> Result<DurableState, Unavailable> {
        let upgraded = storage::marked_upgraded();
        let header = match storage::read() {
            storage::Found::State(state) if !upgraded => return Ok(*state),
            storage::Found::State(state) => Header {
                fence: Some(Fence::Upgraded),
                ..state.header
            },
            storage::Found::Missing if upgraded => Header {
                fence: Some(Fence::Upgraded),
                ..Header::fresh(epoch_unix_ms)
            },
            storage::Found::Missing => shmem::legacy()
                .and_then(|import| import.header())
                .unwrap_or_else(|| Header::fresh(epoch_unix_ms)),
            storage::Found::Damaged(damage) => {
                warning!(
                    "snowid's state in \"global/{}\" is damaged ({damage}): it is created again, fenced",
                    storage::RELATION_NUMBER
                );
                Header {
                    fence: Some(Fence::Unreadable),
                    ..Header::fresh(epoch_unix_ms)
                }
            }
        };
        storage::make_durable(storage::create(&header)).map_err(|_| Unavailable::NotReplicated)?;
        storage::remove_marks();
        match header.fence {
            None => log!("snowid created its state in \"global/{}\"", storage::RELATION_NUMBER),
            Some(fence) => log!(
                "snowid created its state in \"global/{}\" fenced: {}; no ID is issued until a superuser resumes above the IDs already issued",
                storage::RELATION_NUMBER,
                fence.describe()
            ),
        }
        Ok(DurableState::new(header))
    }

    /// The change's WAL record with its pages, flushed, and confirmed by the synchronous
    /// standbys if there are any.
    fn persist(&self, change: &Change) -> Result<(), Unavailable> {
        let lsn = storage::write(change).map_err(Unavailable::Damaged)?;
        storage::make_durable(lsn).map_err(|_| Unavailable::NotReplicated)
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
