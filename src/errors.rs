//! Every error a user can meet, each with a real SQLSTATE, a lowercase message, and a detail
//! and hint where they help.
//!
//! | SQLSTATE | when |
//! |---|---|
//! | 22003 | a shard or sequence number outside its field, or a negative ID to decode |
//! | 22008 | a timestamp outside the range the epoch can encode |
//! | 22023 | a malformed `snowid.epoch` (also stops the server at start-up) |
//! | 54000 | the time field is exhausted: the next ID would need the sign bit |
//! | 55000 | a shard not in `snowid.shards` |
//! | 55000 | `snowid_next` without `shared_preload_libraries`, after the epoch moved later, with an unreadable state file, or with a clock before the epoch |
//! | 58030 | the high-water mark could not be written |

use crate::layout::{MAX_MS, MAX_SEQ, MAX_SHARD};
use crate::{epoch, lease};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgSqlErrorCode::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};

fn raise(code: PgSqlErrorCode, message: String, detail: String, hint: Option<&str>) -> ! {
    let mut report = ErrorReport::new(code, message, "snowid").set_detail(detail);
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// The date the time field runs out under an epoch: 2^40 ms after it.
pub fn exhaustion_date(epoch_unix_ms: i64) -> String {
    epoch::format(epoch_unix_ms + MAX_MS as i64 + 1)
}

pub fn shard_out_of_range(shard: i32) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("snowid shard {shard} is out of range"),
        format!("Shards run from 0 to {MAX_SHARD}: the layout gives the shard 13 bits."),
        None,
    )
}

pub fn shard_not_owned(shard: i32) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("snowid shard {shard} is not owned by this server"),
        format!("snowid.shards is '{}'.", crate::gucs::shards_text()),
        Some(&format!(
            "Generate IDs for shard {shard} on the server that owns it, or add it to snowid.shards \
             in postgresql.conf and reload, once no other server generates for it."
        )),
    )
}

pub fn seq_out_of_range(seq: i32) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("snowid sequence number {seq} is out of range"),
        format!("Sequence numbers run from 0 to {MAX_SEQ}: the layout gives them 10 bits."),
        None,
    )
}

pub fn negative_id(id: i64) -> ! {
    raise(
        ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("snowid {id} is negative"),
        "snowid never issues negative IDs, so this value was not made by snowid.".into(),
        None,
    )
}

pub fn not_preloaded() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid must be loaded via shared_preload_libraries".into(),
        "Generating IDs needs snowid's per-shard state in shared memory, which only exists \
         when the server loads snowid at start-up. Decoding works without it."
            .into(),
        Some(
            "Add shared_preload_libraries = 'snowid' to postgresql.conf (keeping any libraries \
             already listed) and restart the server.",
        ),
    )
}

pub fn exhausted(epoch_unix_ms: i64) -> ! {
    raise(
        ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "snowid time field is exhausted since {}",
            exhaustion_date(epoch_unix_ms)
        ),
        format!(
            "IDs count milliseconds since snowid.epoch ({}) in 40 bits; one more bit would make \
             them negative.",
            epoch::format(epoch_unix_ms)
        ),
        Some("New IDs need a new key space, such as a new table with a later snowid.epoch."),
    )
}

pub fn epoch_moved_later(epoch_unix_ms: i64, recorded_epoch_unix_ms: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "snowid.epoch is later than the epoch of IDs already issued".into(),
        format!(
            "IDs on this cluster were issued under the epoch {}; under {} new IDs would sort below them.",
            epoch::format(recorded_epoch_unix_ms),
            epoch::format(epoch_unix_ms)
        ),
        Some(&format!(
            "Set snowid.epoch back to '{}' (or earlier) and restart. To start a new ID space on \
             purpose, accepting that new IDs may repeat or sort below old ones, stop the server, \
             remove {} from the data directory, and start it again.",
            epoch::format(recorded_epoch_unix_ms),
            lease::FILE_NAME
        )),
    )
}

pub fn state_unreadable() -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "snowid cannot trust its high-water mark file \"{}\"",
            lease::FILE_NAME
        ),
        "The server log from start-up says why. Without it, a clock set back could reissue IDs."
            .into(),
        Some(&format!(
            "Restore {} from a backup of this data directory and restart, or remove it to start \
             from the clock alone.",
            lease::FILE_NAME
        )),
    )
}

pub fn lease_write_failed(error: &std::io::Error) -> ! {
    raise(
        ERRCODE_IO_ERROR,
        format!(
            "could not write snowid high-water mark file \"{}\": {error}",
            lease::FILE_NAME
        ),
        "No ID was issued: an ID past the last durable high-water mark could repeat after a crash."
            .into(),
        Some("Check the data directory's disk space and permissions."),
    )
}

pub fn clock_before_epoch(epoch_unix_ms: i64, now_unix_ms: i64) -> ! {
    raise(
        ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "the system clock is before snowid.epoch".into(),
        format!(
            "The clock reads {}, the epoch is {}.",
            epoch::format(now_unix_ms),
            epoch::format(epoch_unix_ms)
        ),
        Some("Correct the system clock."),
    )
}

pub fn timestamp_out_of_range(what: &str, epoch_unix_ms: i64) -> ! {
    raise(
        ERRCODE_DATETIME_FIELD_OVERFLOW,
        format!("timestamp {what} cannot be encoded in a snowid"),
        format!(
            "snowid IDs cover {} to {} under the current snowid.epoch.",
            epoch::format(epoch_unix_ms),
            epoch::format(epoch_unix_ms + MAX_MS as i64)
        ),
        None,
    )
}

pub fn epoch_argument_not_finite() -> ! {
    raise(
        ERRCODE_DATETIME_FIELD_OVERFLOW,
        "the epoch given to snowid_timestamp must be a finite timestamp".into(),
        "IDs count milliseconds from the epoch, so it cannot be infinity or -infinity.".into(),
        None,
    )
}

pub fn invalid_epoch(text: &str, detail: &str) -> ! {
    raise(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"snowid.epoch\": \"{text}\""),
        detail_line(detail),
        Some("Use an ISO 8601 timestamp with a UTC offset, such as '2011-08-24 21:07:01.721+00'."),
    )
}

/// A bad setting at start-up stops the postmaster, with the reason in the log: running on with
/// the default instead would silently re-date IDs (`snowid.epoch`) or claim every shard
/// (`snowid.shards`).
pub fn invalid_setting_at_startup(name: &str, text: &str, detail: &str, hint: &str) -> ! {
    ErrorReport::new(
        ERRCODE_INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{text}\""),
        "snowid",
    )
    .set_detail(detail_line(detail))
    .set_hint(hint)
    .report(PgLogLevel::FATAL);
    unreachable!("a FATAL report does not return")
}

/// A detail line from a lowercase reason: capitalised, with a full stop.
pub fn detail_line(reason: &str) -> String {
    let mut chars = reason.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect::<String>() + ".",
        None => String::new(),
    }
}
