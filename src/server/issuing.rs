//! What every SQL function that issues IDs or changes the durable state needs from the runtime:
//! the shared state once this server may write, the protocol bound to this backend's host and
//! the server's settings, start-up outside generation, and the error for each refusal.

use crate::errors;
use crate::server::pg_host::PgHost;
use crate::server::{settings, shared_memory};
use pgrx::pg_sys;
use snowid_core::clock::SystemClock;
use snowid_core::durable::Unavailable;
use snowid_core::generator::{Generator, Refused, Shared};
use snowid_core::host::{Clock, DurableStore};
use snowid_core::layout::Shard;
use snowid_core::startup::{self, Context, Occasion};

/// The settings and the wall clock start-up plans with.
pub fn start_context() -> Context {
    Context {
        epoch_unix_ms: settings::epoch_unix_ms(),
        max_lead_ms: settings::max_lead_ms(),
        promotion_margin_ms: settings::promotion_margin_ms(),
        now_wall_ms: SystemClock.wall_ms(),
    }
}

/// Start-up outside generation, with the server's settings: at `CREATE EXTENSION` and `ALTER
/// EXTENSION ... UPDATE` (`Occasion::Install`), and while `pg_upgrade` brings a database with
/// snowid in (`Occasion::PgUpgrade`). Raises the error for a state that could not be written.
pub fn start_up(occasion: Occasion) {
    let context = start_context();
    if let Err(unavailable) = PgHost.start(occasion, &|reading| {
        startup::plan(reading, occasion, &context)
    }) {
        errors::state_unavailable(&unavailable)
    }
}

/// The protocol for this backend's call, with the server's settings.
pub fn generator(state: &Shared) -> Generator<'_, PgHost> {
    Generator::new(
        state,
        &PgHost,
        settings::epoch_unix_ms(),
        settings::max_lead_ms(),
    )
    .with_promotion_margin(settings::promotion_margin_ms())
}

/// The shared state, if this server may change or generate now: preloaded, not in recovery, and
/// in a read-write transaction. `what` names the caller in errors.
pub fn generating_state(what: &str) -> &'static Shared {
    let Some(state) = shared_memory::state() else {
        errors::not_preloaded(what)
    };
    // SAFETY: plain calls and reads of backend state.
    unsafe {
        if pg_sys::RecoveryInProgress() {
            errors::during_recovery(what);
        }
        if pg_sys::XactReadOnly {
            errors::read_only_transaction(what);
        }
    }
    state
}

/// Raises the error for a refusal.
#[cold]
#[track_caller]
pub fn raise_refusal(refused: Refused<Unavailable>, shard: Shard) -> ! {
    let epoch_ms = settings::epoch_unix_ms();
    match refused {
        Refused::Exhausted => errors::exhausted(epoch_ms),
        Refused::ClockBeforeEpoch { base_unix_ms } => {
            errors::clock_before_epoch(epoch_ms, base_unix_ms)
        }
        Refused::Released => errors::shard_released(shard.get()),
        Refused::Fenced(fence) => errors::fenced(fence),
        Refused::EpochMovedLater {
            recorded_epoch_unix_ms,
        } => errors::epoch_moved_later(epoch_ms, recorded_epoch_unix_ms),
        Refused::Persist(unavailable) => errors::state_unavailable(&unavailable),
        Refused::TooFarAhead {
            floor_unix_ms,
            now_unix_ms,
        } => errors::resume_too_far_ahead(floor_unix_ms, now_unix_ms),
        Refused::NotReleased => errors::shard_not_released(shard.get()),
        // A cancel raises its own error from the wait; this is never reached inside PostgreSQL.
        Refused::Interrupted => {
            pg_sys::check_for_interrupts!();
            errors::interrupted()
        }
    }
}
