//! The `snowid.*` settings.
//!
//! - `snowid.epoch` (postmaster): the instant IDs count milliseconds from. Changing it on a live
//!   server would re-date every ID, so it is fixed at start-up.
//! - `snowid.max_lead` (reload): how far a shard's issued time may run ahead of the time base
//!   when more than 1,024 IDs per millisecond are asked for, before callers wait. One value for
//!   the whole server: a per-session value would let one session run a shard far ahead and make
//!   every other session on that shard wait for it.
//! - `snowid.shards` (reload): the shards this server may generate for. Each process keeps the
//!   parsed set as a bitmap that its assign hook replaces on reload.
//! - `snowid.promotion_margin` (reload): after a promotion (or a point-in-time restore), how far
//!   past the wall clock plus `snowid.max_lead` the time base starts; -1 turns it off.
//! - `snowid.citus_database` (reload): where Citus is preloaded, the database whose Citus
//!   metadata gives this server its group (see [`super::citus`]).
//! - `snowid.mask_key_file` (reload): the file of the public IDs' keys, read at start and at
//!   each reload (see [`super::mask_key`]). The setting is a path; no setting holds a key. 0.7.0's
//!   `snowid.mask_key` is gone: a configuration that still sets it stops the server, naming the
//!   file to move the key into.
//!
//! Settings fail closed. At start-up a malformed or out-of-range value in `postgresql.conf`, or an
//! unknown `snowid.*` name (a misspelt one), stops the server with the reason in the log, instead
//! of running on a default. On reload PostgreSQL keeps the last good value of a setting whose new
//! value its check refuses, and logs why. The `snowid` prefix is reserved.
//!
//! The settings are defined only when the library is preloaded: a postmaster-context setting
//! cannot be defined later. Without preloading, decoding still honours a `snowid.epoch` written in
//! `postgresql.conf` by reading the placeholder PostgreSQL keeps for it.

use super::mask_key;
use crate::errors;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use pgrx::prelude::*;
use snowid_core::clock::SystemClock;
use snowid_core::epoch;
use snowid_core::host::Clock;
use snowid_core::layout::Shard;
use snowid_core::shard_set::{LiveShardSet, ShardSet};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Relaxed};

const EPOCH_NAME: &CStr = c"snowid.epoch";
const MAX_LEAD_NAME: &CStr = c"snowid.max_lead";
const SHARDS_NAME: &CStr = c"snowid.shards";
const PROMOTION_MARGIN_NAME: &CStr = c"snowid.promotion_margin";
const MASK_KEY_FILE_NAME: &CStr = c"snowid.mask_key_file";
const CITUS_DATABASE_NAME: &CStr = c"snowid.citus_database";
/// Every setting snowid defines, for spotting misspelt ones.
const NAMES: [&str; 6] = [
    "snowid.epoch",
    "snowid.max_lead",
    "snowid.shards",
    "snowid.promotion_margin",
    "snowid.mask_key_file",
    "snowid.citus_database",
];
/// 0.7.0's setting of the mask's key, which 0.8.0 reads from a file.
const REMOVED_MASK_KEY: &str = "snowid.mask_key";

const MAX_LEAD_DEFAULT_MS: i32 = 1000;
const MAX_LEAD_LIMIT_MS: i32 = 60_000;
/// With the default lead, a promoted server starts 3 s ahead of its clock: above every ID an
/// old primary whose clock agreed could have dated before it died, allowing for 2 s of drift.
const PROMOTION_MARGIN_DEFAULT_MS: i32 = 2000;
const PROMOTION_MARGIN_LIMIT_MS: i32 = 3_600_000;

static EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(epoch::DEFAULT_EPOCH));
static MAX_LEAD_MS: GucSetting<i32> = GucSetting::<i32>::new(MAX_LEAD_DEFAULT_MS);
static SHARDS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(ShardSet::ALL));
static PROMOTION_MARGIN_MS: GucSetting<i32> = GucSetting::<i32>::new(PROMOTION_MARGIN_DEFAULT_MS);
/// Empty (or null) while no key file is named.
static MASK_KEY_FILE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static CITUS_DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// This process's copy of `snowid.shards`.
static OWNED: LiveShardSet = LiveShardSet::all();
/// The shard `snowid_next()` uses in this process, or -1 until it is picked from [`OWNED`]
/// (again after every change of the set).
static OWN_PICK: AtomicI32 = AtomicI32::new(-1);

/// The parsed epoch in Unix milliseconds, once the setting is defined in this server.
static EPOCH_UNIX_MS: AtomicI64 = AtomicI64::new(NOT_DEFINED);
const NOT_DEFINED: i64 = i64::MIN;

/// Defines the settings. Call only from `_PG_init` during `shared_preload_libraries`
/// processing. Stops the server if a `snowid.*` setting in the configuration is unknown,
/// malformed or out of range.
pub fn init() {
    refuse_unknown_settings();
    // Defining a setting only warns about a bad configured value and keeps the default, which
    // would silently re-date IDs, claim every shard or change the lead: check the configured
    // text first and refuse to start.
    let epoch_ms = match configured_text(EPOCH_NAME) {
        None => epoch::DEFAULT_EPOCH_UNIX_MS,
        Some(text) => epoch::parse(&text).unwrap_or_else(|e| {
            errors::invalid_setting_at_startup(
                "snowid.epoch",
                &text,
                &e.to_string(),
                "Use an ISO 8601 timestamp in the past with a UTC offset, such as \
                 '2011-08-24 21:07:01.721+00'.",
            )
        }),
    };
    // A server whose clock is behind at boot still starts (only generation depends on the
    // epoch): generation refuses, with the reason, until the clock passes it.
    if epoch_ms > SystemClock.wall_ms() {
        warning!(
            "snowid.epoch {} is later than the system clock: snowid_next refuses until the clock passes it",
            epoch::format(epoch_ms)
        );
    }
    if let Some(text) = configured_text(SHARDS_NAME) {
        if let Err(e) = ShardSet::parse(&text) {
            errors::invalid_setting_at_startup(
                "snowid.shards",
                &text,
                &e.to_string(),
                "List shard numbers and ranges from 0 to 8191, such as '0-1023,4096'.",
            );
        }
    }
    if let Some(text) = configured_text(MAX_LEAD_NAME) {
        if let Err(reason) = parse_duration(&text, 0, MAX_LEAD_LIMIT_MS) {
            errors::invalid_setting_at_startup(
                "snowid.max_lead",
                &text,
                &reason,
                "Use a duration from 0 to 1min, such as '1s' or '250ms'.",
            );
        }
    }
    if let Some(text) = configured_text(PROMOTION_MARGIN_NAME) {
        if let Err(reason) = parse_duration(&text, -1, PROMOTION_MARGIN_LIMIT_MS) {
            errors::invalid_setting_at_startup(
                "snowid.promotion_margin",
                &text,
                &reason,
                "Use a duration from 0 to 1h, such as '2s', or -1 to turn it off.",
            );
        }
    }
    if let Some(path) = configured_text(MASK_KEY_FILE_NAME) {
        if let Err(e) = mask_key::load(&path) {
            errors::invalid_mask_key_file_at_startup(&e.message, e.detail.as_deref());
        }
    }
    EPOCH_UNIX_MS.store(epoch_ms, Relaxed);

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
            Some(check_text::<Epoch>),
            None,
            None,
        );
    }
    GucRegistry::define_int_guc(
        MAX_LEAD_NAME,
        c"How far an issued ID's time may run ahead of the clock before callers wait.",
        c"Past 1,024 IDs in one millisecond, a shard borrows the next millisecond. This bounds \
          how far ahead borrowing may go; at the bound, callers wait for the clock. One value \
          for the whole server, set in postgresql.conf.",
        &MAX_LEAD_MS,
        0,
        MAX_LEAD_LIMIT_MS,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        PROMOTION_MARGIN_NAME,
        c"After a promotion, how far past the clock plus snowid.max_lead IDs start.",
        c"At the first generation on a new WAL timeline (a promoted standby, a point-in-time \
          restore), the time base starts at least this far past the wall clock plus \
          snowid.max_lead: above the IDs an old primary could have dated before it failed, \
          where its last WAL was lost, as long as the two clocks agree within this margin. \
          -1 turns it off.",
        &PROMOTION_MARGIN_MS,
        -1,
        PROMOTION_MARGIN_LIMIT_MS,
        GucContext::Sighup,
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
            Some(check_text::<Shards>),
            Some(assign_shards),
            None,
        );
    }
    // SAFETY: the hooks are guarded; the check hook reads the file its argument names, the
    // assign hook installs what the check hook parsed.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            MASK_KEY_FILE_NAME,
            c"The file of the public IDs' keys (snowid_mask and its companions).",
            c"Relative to the data directory. A line per key: a database (or * for the default), \
              the key's version, and 32, 48 or 64 hexadecimal digits (an AES-128, -192 or -256 \
              key). Readable by the server's user only, as ssl_key_file. Read at start and at \
              reload. Empty means none: the functions refuse.",
            &MASK_KEY_FILE,
            GucContext::Sighup,
            GucFlags::default(),
            Some(mask_key::check_key_file),
            Some(mask_key::assign_key_file),
            None,
        );
    }
    GucRegistry::define_string_guc(
        CITUS_DATABASE_NAME,
        c"Where Citus is preloaded, the database whose Citus metadata gives this server its shards.",
        c"snowid takes a Citus node's shards from its Citus group, which each database with the \
          citus extension records apart: this names the one that counts, for every database of \
          the server. A node asked by another node in any other database refuses to answer.",
        &CITUS_DATABASE,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // SAFETY: a plain call during preload, with a static string.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"snowid".as_ptr()) };
}

/// Stops the server when the configuration names a `snowid.*` setting that does not exist.
/// PostgreSQL itself would only warn, and drop it.
fn refuse_unknown_settings() {
    for name in placeholder_names() {
        if name == REMOVED_MASK_KEY {
            errors::removed_mask_key_setting_at_startup();
        }
        if name.starts_with("snowid.") && !NAMES.contains(&name.as_str()) {
            let suggestion = NAMES
                .iter()
                .min_by_key(|real| edit_distance(real, &name))
                .filter(|real| edit_distance(real, &name) <= 3);
            errors::unknown_setting_at_startup(&name, suggestion.copied());
        }
    }
}

/// The names of every setting PostgreSQL knows only as a placeholder so far: those of libraries
/// not loaded yet, and misspelt ones.
fn placeholder_names() -> Vec<String> {
    // SAFETY: PostgreSQL's array of settings is valid during start-up, and each entry's name is
    // a NUL-terminated string.
    unsafe {
        #[cfg(feature = "pg15")]
        let (vars, count) = (
            pg_sys::get_guc_variables(),
            pg_sys::GetNumConfigOptions() as usize,
        );
        #[cfg(not(feature = "pg15"))]
        let (vars, count) = {
            let mut count = 0;
            let vars = pg_sys::get_guc_variables(&mut count);
            (vars, count as usize)
        };
        (0..count)
            .map(|i| *vars.add(i))
            .filter(|&var| {
                !var.is_null() && (*var).flags & pg_sys::GUC_CUSTOM_PLACEHOLDER as i32 != 0
            })
            .map(|var| CStr::from_ptr((*var).name).to_string_lossy().into_owned())
            .collect()
    }
}

/// Levenshtein distance, for suggesting the setting a misspelt name meant.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// Checks a configured duration in milliseconds the way PostgreSQL would parse it.
fn parse_duration(text: &str, min_ms: i32, max_ms: i32) -> Result<i32, String> {
    let value = CString::new(text).map_err(|_| "the value contains a NUL byte".to_string())?;
    let mut ms = 0;
    let mut hint: *const c_char = std::ptr::null();
    // SAFETY: parse_int reads the NUL-terminated value and writes the result and a hint pointer.
    let ok = unsafe {
        pg_sys::parse_int(
            value.as_ptr(),
            &mut ms,
            pg_sys::GUC_UNIT_MS as i32,
            &mut hint,
        )
    };
    if !ok {
        return Err("it is not a duration such as '1s' or '250ms'".into());
    }
    if !(min_ms..=max_ms).contains(&ms) {
        return Err(format!(
            "{ms} ms is outside the valid range from {min_ms} to {max_ms} ms"
        ));
    }
    Ok(ms)
}

/// The epoch in Unix milliseconds.
pub fn epoch_unix_ms() -> i64 {
    match EPOCH_UNIX_MS.load(Relaxed) {
        NOT_DEFINED => match configured_text(EPOCH_NAME) {
            None => epoch::DEFAULT_EPOCH_UNIX_MS,
            Some(text) => {
                epoch::parse(&text).unwrap_or_else(|e| errors::invalid_epoch(&text, &e.to_string()))
            }
        },
        ms => ms,
    }
}

/// The epoch in Unix milliseconds, for the hot path of a preloaded server, where it is always
/// defined: one load.
#[inline(always)]
pub fn epoch_unix_ms_preloaded() -> i64 {
    EPOCH_UNIX_MS.load(Relaxed)
}

/// The permitted lead in milliseconds: one load of the setting's variable (pgrx's accessor
/// checks the calling thread first, which the hot path does not need).
#[inline(always)]
pub fn max_lead_ms() -> u64 {
    // SAFETY: a plain read of the setting's variable, which PostgreSQL writes only between
    // statements, on this thread.
    // The setting's range is 0 to 60,000; through u32, even a negative could not overflow.
    unsafe { *MAX_LEAD_MS.as_ptr() as u32 as u64 }
}

/// How far past the wall clock plus the lead a promoted server's time base starts, or `None`
/// when that is turned off.
pub fn promotion_margin_ms() -> Option<u64> {
    u64::try_from(PROMOTION_MARGIN_MS.get()).ok()
}

/// Whether the settings are defined: snowid was preloaded.
pub fn defined() -> bool {
    EPOCH_UNIX_MS.load(Relaxed) != NOT_DEFINED
}

/// Whether this server may generate IDs for a shard (one load and a bit test).
#[inline(always)]
pub fn owns(shard: Shard) -> bool {
    OWNED.contains(shard)
}

/// The shard `snowid_next()` uses in this process, once picked (see [`own_shard`]).
#[inline(always)]
pub fn own_shard_picked() -> Option<Shard> {
    Shard::new(OWN_PICK.load(Relaxed))
}

/// The shard `snowid_next()` uses in this process: among the owned shards that are also in
/// `within` (what the check on Citus allows; every shard elsewhere), the one whose rank is the
/// backend's number modulo their count, so backends spread over them. Cached until the set
/// changes or the cached shard leaves `within`. `None` when there is no such shard.
#[inline]
pub fn own_shard(backend_number: usize, within: &ShardSet) -> Option<Shard> {
    own_shard_picked()
        .filter(|shard| within.contains(shard.index()))
        .or_else(|| pick_own_shard(backend_number, 0, within))
}

/// Picks the owned shard in `within` `skip` places after this backend's own (after a release),
/// and remembers it. `None` when there is no such shard.
#[cold]
pub fn pick_own_shard(backend_number: usize, skip: usize, within: &ShardSet) -> Option<Shard> {
    let shard = OWNED
        .snapshot()
        .intersection(within)
        .nth_wrapping(backend_number + skip)?;
    OWN_PICK.store(shard as i32, Relaxed);
    Shard::new(shard as i32)
}

/// How many shards this server owns that are in `within`.
pub fn owned_count(within: &ShardSet) -> usize {
    OWNED.snapshot().intersection(within).len()
}

/// `snowid.shards` as this process has it.
pub fn configured_shards() -> ShardSet {
    OWNED.snapshot()
}

/// `snowid.citus_database` as this process has it.
pub fn citus_database() -> String {
    CITUS_DATABASE
        .get()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `snowid.shards` in canonical form, such as `0-1023,4096`.
pub fn shards_text() -> String {
    let text = SHARDS.get().map(|t| t.to_string_lossy().into_owned());
    let all = ShardSet::ALL.to_string_lossy();
    match ShardSet::parse(text.as_deref().unwrap_or(&all)) {
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

/// A string setting whose proposed values are checked in `ALTER SYSTEM` and configuration
/// reloads by parsing them.
trait Parsed {
    /// Why `text` is no value of the setting, if it is none.
    fn reason_against(text: &str) -> Result<(), String>;
}

/// `snowid.epoch`. (An epoch later than the clock is accepted: generation refuses until the
/// clock passes it.)
struct Epoch;

impl Parsed for Epoch {
    fn reason_against(text: &str) -> Result<(), String> {
        epoch::parse(text).map(drop).map_err(|e| e.to_string())
    }
}

/// `snowid.shards`.
struct Shards;

impl Parsed for Shards {
    fn reason_against(text: &str) -> Result<(), String> {
        ShardSet::parse(text).map(drop).map_err(|e| e.to_string())
    }
}

/// A string setting's check hook: rejects a proposed value (null counts as empty) that `S` does
/// not parse, handing its reason to PostgreSQL as the error detail.
#[pg_guard]
unsafe extern "C-unwind" fn check_text<S: Parsed>(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a pointer to the proposed value, a
    // NUL-terminated string, or to null.
    let text = unsafe {
        (*newval)
            .as_ref()
            .map(|p| CStr::from_ptr(p).to_string_lossy())
    };
    match S::reason_against(text.as_deref().unwrap_or("")) {
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
        OWN_PICK.store(-1, Relaxed);
    }
}

/// A number unique among the server's live backends, dense from 0: how `snowid_next()` spreads
/// backends over the owned shards. A parallel worker takes its leader's, so that it draws from
/// the leader's shard and one session's IDs keep increasing.
pub fn backend_number() -> usize {
    // SAFETY: plain reads of this process's number and its leader's, set before it runs SQL.
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    let number = unsafe {
        match pg_sys::ParallelLeaderBackendId {
            pg_sys::InvalidBackendId => pg_sys::MyBackendId,
            leader => leader,
        }
    } - 1;
    // SAFETY: as above.
    #[cfg(not(any(feature = "pg15", feature = "pg16")))]
    let number = unsafe {
        match pg_sys::ParallelLeaderProcNumber {
            pg_sys::INVALID_PROC_NUMBER => pg_sys::MyProcNumber,
            leader => leader,
        }
    };
    number.max(0) as usize
}

/// Logs a warning at start-up when the time field runs out within a year.
pub fn warn_if_exhaustion_is_near(epoch_ms: i64) {
    use snowid_core::host::Clock;
    const YEAR_MS: i64 = 365 * 86_400_000;
    let exhausted_at = snowid_core::layout::exhaustion_unix_ms(epoch_ms);
    if exhausted_at - snowid_core::clock::SystemClock.wall_ms() < YEAR_MS {
        warning!(
            "snowid IDs run out at {}: after that snowid_next fails rather than issue negative IDs",
            snowid_core::epoch::format(exhausted_at)
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn edit_distance_finds_the_misspelt_setting() {
        use super::edit_distance;
        assert_eq!(edit_distance("snowid.shards", "snowid.shard"), 1);
        assert_eq!(edit_distance("snowid.max_lead", "snowid.maxlead"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
