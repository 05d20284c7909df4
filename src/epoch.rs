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
pub const DEFAULT_EPOCH: &str = "2026-01-01 00:00:00+00";
/// [`DEFAULT_EPOCH`] as Unix milliseconds.
pub const DEFAULT_EPOCH_UNIX_MS: i64 = 1_767_225_600_000;

const MS_PER_DAY: i64 = 86_400_000;

/// Parses an ISO 8601 timestamp with a UTC offset into Unix milliseconds. The error says what is
/// wrong, in words fit for a log line's detail.
pub fn parse(text: &str) -> Result<i64, String> {
    let mut p = Parser { rest: text.trim() };
    let year = p.digits(4, "a four-digit year")?;
    p.expect('-')?;
    let month = p.digits(2, "a two-digit month")?;
    p.expect('-')?;
    let day = p.digits(2, "a two-digit day")?;
    if !p.eat('T') && !p.eat(' ') {
        return Err("expected a time after the date, such as \"2026-01-01 00:00:00+00\"".into());
    }
    let hour = p.digits(2, "a two-digit hour")?;
    p.expect(':')?;
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
        return Err(format!("unexpected \"{}\" at the end", p.rest));
    }

    if !(1..=12).contains(&month) {
        return Err(format!("month {month} does not exist"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(format!("day {day} does not exist in {year:04}-{month:02}"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!(
            "time {hour:02}:{minute:02}:{second:02} does not exist"
        ));
    }
    if micros % 1000 != 0 {
        return Err("the epoch must be a whole millisecond".into());
    }

    let days = days_from_civil(year, month, day);
    let local_ms = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + micros / 1000;
    Ok(local_ms - offset_minutes * 60_000)
}

/// Parses an epoch and checks that it is not in the future, given the wall clock.
pub fn validate(text: &str, now_unix_ms: i64) -> Result<i64, String> {
    let epoch = parse(text)?;
    if epoch > now_unix_ms {
        return Err(format!(
            "the epoch {} is in the future; IDs count milliseconds since it",
            format(epoch)
        ));
    }
    Ok(epoch)
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

    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected \"{c}\" before \"{}\"", self.rest))
        }
    }

    fn digits(&mut self, n: usize, what: &str) -> Result<i64, String> {
        let head = self
            .rest
            .get(..n)
            .filter(|h| h.bytes().all(|b| b.is_ascii_digit()));
        match head {
            Some(head) => {
                self.rest = &self.rest[n..];
                Ok(head.parse().expect("ascii digits"))
            }
            None => Err(format!("expected {what} at \"{}\"", self.rest)),
        }
    }

    /// Up to six fractional digits, as microseconds.
    fn fraction(&mut self) -> Result<i64, String> {
        let len = self.rest.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 || len > 6 {
            return Err("expected one to six digits after the decimal point".into());
        }
        let digits = &self.rest[..len];
        self.rest = &self.rest[len..];
        Ok(digits.parse::<i64>().expect("ascii digits") * 10_i64.pow(6 - len as u32))
    }

    /// The UTC offset in minutes east of Greenwich.
    fn offset(&mut self) -> Result<i64, String> {
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
            return Err(
                "a UTC offset is required, such as \"+00\", \"+05:30\" or \"Z\"; without one the \
                 epoch would depend on the server's time zone"
                    .into(),
            );
        };
        let hours = self.digits(2, "a two-digit offset hour")?;
        let minutes = if self.eat(':') || self.rest.len() == 2 {
            self.digits(2, "two-digit offset minutes")?
        } else {
            0
        };
        if hours > 15 || minutes > 59 {
            return Err(format!(
                "offset {hours:02}:{minutes:02} is not a real UTC offset"
            ));
        }
        Ok(sign * (hours * 60 + minutes))
    }
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
            " 2011-08-24 21:07:01.721000+00 ",
        ] {
            assert_eq!(parse(text), Ok(INSTAGRAM), "{text}");
        }
    }

    #[test]
    fn the_default_epoch_constant_matches_its_text() {
        assert_eq!(parse(DEFAULT_EPOCH), Ok(DEFAULT_EPOCH_UNIX_MS));
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
            ("2011-01-01 00:00:00.0001+00", "whole millisecond"),
            ("2011-01-01 00:00+00 junk", "unexpected"),
            ("2011-01-01 00:00+16", "not a real UTC offset"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn formats_like_postgresql_in_utc() {
        assert_eq!(format(INSTAGRAM), "2011-08-24 21:07:01.721+00");
        assert_eq!(format(0), "1970-01-01 00:00:00.000+00");
        assert_eq!(format(-1), "1969-12-31 23:59:59.999+00");
        assert_eq!(
            format(DEFAULT_EPOCH_UNIX_MS + (1 << 40)),
            "2060-11-03 19:53:47.776+00"
        );
    }

    #[test]
    fn refuses_an_epoch_in_the_future() {
        assert_eq!(
            validate(DEFAULT_EPOCH, DEFAULT_EPOCH_UNIX_MS),
            Ok(DEFAULT_EPOCH_UNIX_MS)
        );
        let err = validate(DEFAULT_EPOCH, DEFAULT_EPOCH_UNIX_MS - 1).unwrap_err();
        assert!(err.contains("in the future"), "{err}");
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

    proptest! {
        #[test]
        fn format_and_parse_round_trip(ms in -62_135_596_800_000_i64..253_402_300_799_999) {
            prop_assert_eq!(parse(&format(ms)), Ok(ms));
        }
    }
}
