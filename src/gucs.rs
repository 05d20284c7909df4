//! The `snowid.*` settings.
//!
//! - `snowid.epoch` (postmaster): the instant IDs count milliseconds from. Changing it on a live
//!   server would re-date every ID, so it is fixed at start-up, and a malformed or future value
//!   stops the server from starting.
//! - `snowid.max_lead` (superuser): how far a shard's issued time may run ahead of the clock when
//!   more than 1,024 IDs per millisecond are asked for, before callers wait.
//! - `snowid.shards` (reload): the shards this server may generate for. Each process keeps the
//!   parsed set as a bitmap that its assign hook replaces on reload.
//!
//! The settings are defined only when the library is preloaded: a postmaster-context setting
//! cannot be defined later. Without preloading, decoding still honours a `snowid.epoch` written in
//! `postgresql.conf` by reading the placeholder PostgreSQL keeps for it.

use crate::shard_set::{LiveShardSet, ShardSet};
use crate::{clock, epoch, errors};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, Ordering};

const EPOCH_NAME: &CStr = c"snowid.epoch";
const SHARDS_NAME: &CStr = c"snowid.shards";

static EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"2026-01-01 00:00:00+00"));
static MAX_LEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);
static SHARDS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"0-8191"));

/// This process's copy of `snowid.shards`.
static OWNED: LiveShardSet = LiveShardSet::all();

/// The parsed epoch in Unix milliseconds, once the setting is defined in this server.
static EPOCH_UNIX_MS: AtomicI64 = AtomicI64::new(NOT_DEFINED);
const NOT_DEFINED: i64 = i64::MIN;

/// Defines the settings. Call only from `_PG_init` during `shared_preload_libraries`
/// processing. Stops the server if `snowid.epoch` is malformed or in the future.
pub fn init() {
    // Defining the setting would only warn about a bad configured value and keep the default,
    // which would silently re-date every ID: check the configured text first and refuse to start.
    let epoch_ms = match configured_text(EPOCH_NAME) {
        None => epoch::DEFAULT_EPOCH_UNIX_MS,
        Some(text) => epoch::validate(&text, clock::unix_ms_now()).unwrap_or_else(|detail| {
            errors::invalid_setting_at_startup(
                "snowid.epoch",
                &text,
                &detail,
                "Use an ISO 8601 timestamp in the past with a UTC offset, such as \
                 '2011-08-24 21:07:01.721+00'.",
            )
        }),
    };
    if let Some(text) = configured_text(SHARDS_NAME) {
        if let Err(detail) = ShardSet::parse(&text) {
            errors::invalid_setting_at_startup(
                "snowid.shards",
                &text,
                &detail,
                "List shard numbers and ranges from 0 to 8191, such as '0-1023,4096'.",
            );
        }
    }
    EPOCH_UNIX_MS.store(epoch_ms, Ordering::Relaxed);

    // SAFETY: the check hook is guarded and only reads its argument.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            EPOCH_NAME,
            c"The instant snowid IDs count milliseconds from.",
            c"An ISO 8601 timestamp with a UTC offset, such as '2011-08-24 21:07:01.721+00'. \
              IDs stay positive for 2^40 ms (about 34.8 years) after it. Fixed at server start.",
            &EPOCH,
            GucContext::Postmaster,
            GucFlags::default(),
            Some(check_epoch),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        c"snowid.max_lead",
        c"How far an issued ID's time may run ahead of the clock before callers wait.",
        c"Past 1,024 IDs in one millisecond, a shard borrows the next millisecond. This bounds \
          how far ahead borrowing may go; at the bound, callers wait for the clock.",
        &MAX_LEAD_MS,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    // SAFETY: the hooks are guarded; the check hook only reads its argument.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            SHARDS_NAME,
            c"The shards this server may generate IDs for.",
            c"Numbers and ranges such as '0-1023,4096'. Two servers with disjoint sets never issue \
              the same ID. snowid_next refuses any other shard. Empty means none.",
            &SHARDS,
            GucContext::Sighup,
            GucFlags::default(),
            Some(check_shards),
            Some(assign_shards),
            None,
        );
    }
    unsafe { pg_sys::MarkGUCPrefixReserved(c"snowid".as_ptr()) };
}

/// The epoch in Unix milliseconds.
pub fn epoch_unix_ms() -> i64 {
    match EPOCH_UNIX_MS.load(Ordering::Relaxed) {
        NOT_DEFINED => match configured_text(EPOCH_NAME) {
            None => epoch::DEFAULT_EPOCH_UNIX_MS,
            Some(text) => epoch::parse(&text).unwrap_or_else(|d| errors::invalid_epoch(&text, &d)),
        },
        ms => ms,
    }
}

/// The permitted lead in milliseconds.
#[inline]
pub fn max_lead_ms() -> u64 {
    MAX_LEAD_MS.get().max(0) as u64
}

/// Whether this server may generate IDs for a shard (one load and a bit test).
#[inline]
pub fn owns(shard: usize) -> bool {
    OWNED.contains(shard)
}

/// `snowid.shards` in canonical form, such as `0-1023,4096`.
pub fn shards_text() -> String {
    let text = SHARDS.get().map(|t| t.to_string_lossy().into_owned());
    match ShardSet::parse(text.as_deref().unwrap_or(ShardSet::ALL_TEXT)) {
        Ok(set) => set.to_string(),
        Err(_) => text.unwrap_or_default(),
    }
}

/// The text of a setting as configured, read from the setting or its placeholder.
fn configured_text(name: &CStr) -> Option<String> {
    // SAFETY: GetConfigOption returns null or a NUL-terminated string owned by the GUC system.
    unsafe {
        let raw = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!raw.is_null()).then(|| CStr::from_ptr(raw).to_string_lossy().into_owned())
    }
}

/// Rejects a malformed or future epoch in `ALTER SYSTEM` and configuration reloads.
#[pg_guard]
unsafe extern "C-unwind" fn check_epoch(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the proposed value.
    unsafe {
        check_text(newval, |text| {
            epoch::validate(text, clock::unix_ms_now()).map(drop)
        })
    }
}

/// Rejects a malformed `snowid.shards`, in the configuration file or in `ALTER SYSTEM`.
#[pg_guard]
unsafe extern "C-unwind" fn check_shards(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to the proposed value.
    unsafe { check_text(newval, |text| ShardSet::parse(text).map(drop)) }
}

/// A string setting's check: runs `validate` on the proposed value (null counts as empty) and
/// hands its reason to PostgreSQL as the error detail.
///
/// # Safety
///
/// `newval` points to a pointer to a NUL-terminated string, or to null.
unsafe fn check_text(
    newval: *mut *mut c_char,
    validate: impl Fn(&str) -> Result<(), String>,
) -> bool {
    // SAFETY: guaranteed by the caller.
    let text = unsafe {
        (*newval)
            .as_ref()
            .map(|p| CStr::from_ptr(p).to_string_lossy())
    };
    match validate(text.as_deref().unwrap_or("")) {
        Ok(()) => true,
        Err(reason) => {
            let detail = CString::new(errors::detail_line(&reason)).unwrap_or_default();
            // SAFETY: PostgreSQL reads this palloc'd string right after the hook returns.
            unsafe { pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr()) };
            false
        }
    }
}

/// Installs a checked `snowid.shards` in this process.
#[pg_guard]
unsafe extern "C-unwind" fn assign_shards(newval: *const c_char, _extra: *mut c_void) {
    // SAFETY: PostgreSQL passes a valid pointer to a NUL-terminated string or to null.
    let text = unsafe { newval.as_ref().map(|p| CStr::from_ptr(p).to_string_lossy()) };
    if let Ok(set) = ShardSet::parse(text.as_deref().unwrap_or("")) {
        OWNED.replace(&set);
    }
}
