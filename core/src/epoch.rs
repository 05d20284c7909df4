//! The epoch: parsing `snowid.epoch` and writing instants back as text, in pure Rust.
//!
//! The setting is read in the postmaster before any database access, so it is parsed here rather
//! than through PostgreSQL's date input (which would also depend on the session's `TimeZone`).
//! The accepted form is ISO 8601 with a mandatory UTC offset:
//!
//! ```text
//! YYYY-MM-DD{ |T}HH:MM[:SS[.fraction]][ ]{Z|UTC|±HH|±HH:MM|±HHMM}
//! ```
//!
//! Instants are Unix milliseconds (`i64`). An epoch must be a whole millisecond.

/// The default epoch, 2026-01-01 00:00:00 UTC. IDs stay positive until 2060-11-03.
/// A C string, because it is also the setting's compiled-in default.
pub const DEFAULT_EPOCH: &std::ffi::CStr = c"2026-01-01 00:00:00+00";
/// [`DEFAULT_EPOCH`] as Unix milliseconds.
pub const DEFAULT_EPOCH_UNIX_MS: i64 = 1_767_225_600_000;

const MS_PER_DAY: i64 = 86_400_000;

/// Why a text is not an epoch. Displayed in lowercase words fit for a log line's detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochError {
    /// Something else was found where a part of the timestamp was expected.
    Expected {
        what: &'static str,
        at: String,
    },
    /// The date has no time after it.
    NoTime,
    /// There is no UTC offset, so the instant would depend on the server's time zone.
    NoOffset,
    /// Text follows the offset.
    Trailing(String),
    /// A fraction with no digits or more than six.
    Fraction,
    MonthDoesNotExist(i64),
    DayDoesNotExist {
        year: i64,
        month: i64,
        day: i64,
    },
    TimeDoesNotExist {
        hour: i64,
        minute: i64,
        second: i64,
    },
    OffsetDoesNotExist {
        hours: i64,
        minutes: i64,
    },
    /// Finer than a millisecond.
    NotWholeMillisecond,
}

impl std::fmt::Display for EpochError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EpochError::Expected { what, at } => write!(f, "expected {what} at \"{at}\""),
            EpochError::NoTime => {
                write!(
                    f,
                    "expected a time after the date, such as \"2026-01-01 00:00:00+00\""
                )
            }
            EpochError::NoOffset => write!(
                f,
                "a UTC offset is required, such as \"+00\", \"+05:30\" or \"Z\"; without one the \
                 epoch would depend on the server's time zone"
            ),
            EpochError::Trailing(rest) => write!(f, "unexpected \"{rest}\" at the end"),
            EpochError::Fraction => {
                write!(f, "expected one to six digits after the decimal point")
            }
            EpochError::MonthDoesNotExist(month) => write!(f, "month {month} does not exist"),
            EpochError::DayDoesNotExist { year, month, day } => {
                write!(f, "day {day} does not exist in {year:04}-{month:02}")
            }
            EpochError::TimeDoesNotExist {
                hour,
                minute,
                second,
            } => write!(f, "time {hour:02}:{minute:02}:{second:02} does not exist"),
            EpochError::OffsetDoesNotExist { hours, minutes } => {
                write!(f, "offset {hours:02}:{minutes:02} is not a real UTC offset")
            }
            EpochError::NotWholeMillisecond => write!(f, "the epoch must be a whole millisecond"),
        }
    }
}

/// Parses an ISO 8601 timestamp with a UTC offset into Unix milliseconds. The error says what is
/// wrong, in words fit for a log line's detail.
pub fn parse(text: &str) -> Result<i64, EpochError> {
    let mut p = Parser { rest: text.trim() };
    let year = p.digits(4, "a four-digit year")?;
    p.expect('-', "\"-\" after the year")?;
    let month = p.digits(2, "a two-digit month")?;
    p.expect('-', "\"-\" after the month")?;
    let day = p.digits(2, "a two-digit day")?;
    if !p.eat('T') && !p.eat(' ') {
        return Err(EpochError::NoTime);
    }
    let hour = p.digits(2, "a two-digit hour")?;
    p.expect(':', "\":\" after the hour")?;
    let minute = p.digits(2, "two-digit minutes")?;
    let (mut second, mut micros) = (0, 0);
    if p.eat(':') {
        second = p.digits(2, "two-digit seconds")?;
        if p.eat('.') {
            micros = p.fraction()?;
        }
    }
    p.eat(' ');
    let offset_minutes = p.offset()?;
    if !p.rest.is_empty() {
        return Err(EpochError::Trailing(p.rest.into()));
    }

    if !(1..=12).contains(&month) {
        return Err(EpochError::MonthDoesNotExist(month));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(EpochError::DayDoesNotExist { year, month, day });
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(EpochError::TimeDoesNotExist {
            hour,
            minute,
            second,
        });
    }
    if micros % 1000 != 0 {
        return Err(EpochError::NotWholeMillisecond);
    }

    let days = days_from_civil(year, month, day);
    let local_ms = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + micros / 1000;
    Ok(local_ms - offset_minutes * 60_000)
}

/// The Unix time of PostgreSQL's own epoch, 2000-01-01 00:00:00 UTC, in milliseconds.
const POSTGRES_EPOCH_UNIX_MS: i64 = 946_684_800_000;

/// Unix milliseconds as a PostgreSQL `timestamptz` value (microseconds since 2000-01-01).
pub fn unix_ms_to_timestamptz(unix_ms: i64) -> i64 {
    (unix_ms - POSTGRES_EPOCH_UNIX_MS) * 1000
}

/// A PostgreSQL `timestamptz` value as Unix milliseconds, truncated toward the past to the
/// millisecond it falls in.
pub fn timestamptz_to_unix_ms(micros: i64) -> i64 {
    micros.div_euclid(1000) + POSTGRES_EPOCH_UNIX_MS
}

/// Writes Unix milliseconds as `YYYY-MM-DD HH:MM:SS.mmm+00`, the form PostgreSQL prints in UTC.
pub fn format(unix_ms: i64) -> String {
    let days = unix_ms.div_euclid(MS_PER_DAY);
    let ms_of_day = unix_ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    text_of(year, month, day, ms_of_day)
}

/// A date and a time of day as `YYYY-MM-DD HH:MM:SS.mmm+00`.
fn text_of(year: i64, month: i64, day: i64, ms_of_day: i64) -> String {
    let (secs, ms) = (ms_of_day / 1000, ms_of_day % 1000);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{ms:03}+00",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    fn eat(&mut self, c: char) -> bool {
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char, what: &'static str) -> Result<(), EpochError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn expected(&self, what: &'static str) -> EpochError {
        EpochError::Expected {
            what,
            at: self.rest.into(),
        }
    }

    fn digits(&mut self, n: usize, what: &'static str) -> Result<i64, EpochError> {
        let head = self
            .rest
            .get(..n)
            .filter(|h| h.bytes().all(|b| b.is_ascii_digit()));
        match head {
            Some(head) => {
                self.rest = &self.rest[n..];
                Ok(decimal(head))
            }
            None => Err(self.expected(what)),
        }
    }

    /// Up to six fractional digits, as microseconds.
    fn fraction(&mut self) -> Result<i64, EpochError> {
        let len = self.rest.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 || len > 6 {
            return Err(EpochError::Fraction);
        }
        let digits = &self.rest[..len];
        self.rest = &self.rest[len..];
        Ok(decimal(digits) * 10_i64.pow(6 - len as u32))
    }

    /// The UTC offset in minutes east of Greenwich.
    fn offset(&mut self) -> Result<i64, EpochError> {
        if self.eat('Z') || self.eat('z') {
            return Ok(0);
        }
        if self
            .rest
            .get(..3)
            .is_some_and(|head| head.eq_ignore_ascii_case("utc"))
        {
            self.rest = &self.rest[3..];
            return Ok(0);
        }
        let sign = if self.eat('+') {
            1
        } else if self.eat('-') {
            -1
        } else {
            return Err(EpochError::NoOffset);
        };
        let hours = self.digits(2, "a two-digit offset hour")?;
        let minutes = if self.eat(':') || self.rest.len() == 2 {
            self.digits(2, "two-digit offset minutes")?
        } else {
            0
        };
        if hours > 15 || minutes > 59 {
            return Err(EpochError::OffsetDoesNotExist { hours, minutes });
        }
        Ok(sign * (hours * 60 + minutes))
    }
}

/// The value of a run of ASCII digits (at most six, so it cannot overflow).
fn decimal(digits: &str) -> i64 {
    digits
        .bytes()
        .fold(0, |n, digit| n * 10 + i64::from(digit - b'0'))
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Instagram's published epoch, 1314220021721 ms.
    const INSTAGRAM: i64 = 1_314_220_021_721;

    #[test]
    fn parses_instagrams_epoch_in_every_spelling() {
        for text in [
            "2011-08-24 21:07:01.721+00",
            "2011-08-24T21:07:01.721Z",
            "2011-08-24 21:07:01.721 UTC",
            "2011-08-24 23:07:01.721+02:00",
            "2011-08-24 23:07:01.721+0200",
            "2011-08-24 16:07:01.721-05",
            "2011-08-25 02:37:01.721+05:30",
            "2011-08-24 22:06:01.721+00:59",
            "2011-08-25 12:07:01.721+15:00",
            "2011-08-24 21:06:01.721-00:01",
            " 2011-08-24 21:07:01.721000+00 ",
        ] {
            assert_eq!(parse(text), Ok(INSTAGRAM), "{text}");
        }
    }

    #[test]
    fn the_default_epoch_constant_matches_its_text() {
        assert_eq!(
            parse(DEFAULT_EPOCH.to_str().unwrap()),
            Ok(DEFAULT_EPOCH_UNIX_MS)
        );
    }

    #[test]
    fn refuses_malformed_epochs_with_a_reason() {
        for (text, reason) in [
            ("2011-08-24 21:07:01", "a UTC offset is required"),
            ("2011-08-24", "expected a time"),
            ("yesterday", "four-digit year"),
            ("2011-02-30 00:00+00", "day 30 does not exist"),
            ("2011-13-01 00:00+00", "month 13"),
            ("2011-01-01 24:00+00", "does not exist"),
            ("2011-01-01 23:60+00", "does not exist"),
            ("2011-01-01 23:59:60+00", "does not exist"),
            ("2011-01-01 00:00:00.0001+00", "whole millisecond"),
            ("2011-01-01 00:00+00 junk", "unexpected"),
            ("2011-01-01 00:00+16", "not a real UTC offset"),
            ("2011-01-01 00:00+05:60", "not a real UTC offset"),
            ("2011-01-01 00:00:00.+00", "after the decimal point"),
            ("2011-01-01 00:00:00.1234567+00", "after the decimal point"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn formats_like_postgresql_in_utc() {
        assert_eq!(format(INSTAGRAM), "2011-08-24 21:07:01.721+00");
        assert_eq!(format(0), "1970-01-01 00:00:00.000+00");
        assert_eq!(format(-1), "1969-12-31 23:59:59.999+00");
        // The last day of a 400-year cycle, where the calendar's era arithmetic turns over.
        assert_eq!(format(951_782_400_000), "2000-02-29 00:00:00.000+00");
        assert_eq!(format(951_868_800_000), "2000-03-01 00:00:00.000+00");
        assert_eq!(
            format(DEFAULT_EPOCH_UNIX_MS + (1 << 40)),
            "2060-11-03 19:53:47.776+00"
        );
    }

    #[test]
    fn converts_to_postgresql_timestamps_and_truncates_to_the_millisecond() {
        assert_eq!(unix_ms_to_timestamptz(946_684_800_000), 0);
        assert_eq!(unix_ms_to_timestamptz(INSTAGRAM), 367_535_221_721_000);
        assert_eq!(timestamptz_to_unix_ms(367_535_221_721_999), INSTAGRAM);
        assert_eq!(
            timestamptz_to_unix_ms(-1),
            946_684_799_999,
            "before 2000 truncates down too"
        );
    }

    /// The calendar against an independent one (chrono), so that a wrong leap-year rule cannot
    /// hide behind a round trip through the same code.
    fn chrono_unix_ms(year: i32, month: u32, day: u32, ms_of_day: u32) -> Option<i64> {
        let date = chrono::NaiveDate::from_ymd_opt(year, month, day)?;
        let time = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
            ms_of_day / 1000,
            (ms_of_day % 1000) * 1_000_000,
        )?;
        Some(date.and_time(time).and_utc().timestamp_millis())
    }

    fn text(year: i32, month: u32, day: u32, ms_of_day: u32) -> String {
        text_of(year.into(), month.into(), day.into(), ms_of_day.into())
    }

    #[test]
    fn leap_days_follow_the_gregorian_rule() {
        for (date, exists) in [
            ("1900-02-29", false),
            ("2000-02-29", true),
            ("2024-02-29", true),
            ("2026-02-29", false),
            ("2100-02-29", false),
            ("2400-02-29", true),
        ] {
            let result = parse(&format!("{date} 00:00+00"));
            assert_eq!(result.is_ok(), exists, "{date}: {result:?}");
            let (y, m, d) = (&date[..4], &date[5..7], &date[8..]);
            let oracle = chrono_unix_ms(
                y.parse().unwrap(),
                m.parse().unwrap(),
                d.parse().unwrap(),
                0,
            );
            assert_eq!(result.ok(), oracle, "{date} agrees with chrono");
        }
    }

    proptest! {
        /// Any year-month-day triple, valid or not, is accepted exactly when chrono accepts it,
        /// and then as the same instant; and the formatter writes what chrono writes.
        #[test]
        fn the_calendar_agrees_with_chrono(year in 1i32..=9999, month in 1u32..=12, day in 1u32..=31, ms_of_day in 0u32..86_400_000) {
            let oracle = chrono_unix_ms(year, month, day, ms_of_day);
            prop_assert_eq!(parse(&text(year, month, day, ms_of_day)).ok(), oracle);
            if let Some(ms) = oracle {
                let expected = chrono::DateTime::from_timestamp_millis(ms).unwrap()
                    .format("%Y-%m-%d %H:%M:%S%.3f+00").to_string();
                prop_assert_eq!(format(ms), expected);
            }
        }

        #[test]
        fn format_and_parse_round_trip(ms in -62_135_596_800_000_i64..253_402_300_799_999) {
            prop_assert_eq!(parse(&format(ms)), Ok(ms));
        }
    }
}
