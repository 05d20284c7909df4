//! The durable high-water mark: a lease of future time.
//!
//! The promise it keeps: every ID ever issued on this cluster has a time field below
//! `lease_end_unix_ms - epoch_unix_ms` of the newest durable [`Record`]. A generator may only hand
//! out a stamp whose millisecond the lease covers; to go further, one caller makes a longer lease
//! durable before anyone may use it (see [`crate::generator`]).
//!
//! A record has two forms:
//! - binary, [`Record::to_bytes`], for the WAL: so standbys, crash recovery and restores from a
//!   base backup learn every lease the primary wrote;
//! - text, [`StateFile`], in `$PGDATA/snowid.state`: so the lease survives checkpoints, which
//!   PostgreSQL does not replay WAL from before.
//!
//! At start-up, and after a backend crash resets shared memory, every shard resumes at the end
//! of the lease, and the time base resumes no lower than the recorded base, whatever the wall
//! clock says.
//!
//! The record names the epoch it was written under. A later epoch would make new IDs smaller
//! than old ones, so generation refuses; an earlier one keeps them larger, provably, and is
//! accepted.
//!
//! The file is text, for operators. The server *seals* it when it stops, with the location of
//! the checkpoint it stopped at; a file that does not carry the seal of the data directory's last
//! clean shutdown is older than the data directory (an old copy put back), and is refused rather
//! than trusted:
//!
//! ```text
//! # snowid high-water mark. Do not edit, and never put back an older copy.
//! version=2
//! epoch_unix_ms=1767225600000
//! base_unix_ms=1795000000000
//! lease_end_unix_ms=1795000001501
//! sealed_at_lsn=0/1A2B3C8
//! checksum=8c1f5cbd2fb4a4f1
//! ```

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

/// The state file's name, in the data directory.
pub const FILE_NAME: &str = "snowid.state";
const TEMP_NAME: &str = "snowid.state.tmp";
/// How much time beyond what is needed one lease write covers.
pub const LEASE_WINDOW_MS: u64 = 1500;
/// How long before the lease runs out an issuing caller renews it, so that the others never wait
/// for the write. Under sustained load that is one write per `LEASE_WINDOW_MS - RENEW_AHEAD_MS`.
pub const RENEW_AHEAD_MS: u64 = 500;
const _: () = assert!(RENEW_AHEAD_MS < LEASE_WINDOW_MS);

/// One lease. All instants are Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The epoch the IDs under this lease were issued with.
    pub epoch_unix_ms: i64,
    /// The time base when the lease was written: a restart's time base starts no lower.
    pub base_unix_ms: i64,
    /// No ID issued so far has a time at or past this instant.
    pub lease_end_unix_ms: i64,
}

/// Why a record cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseError {
    Io(String),
    MissingField(&'static str),
    NotANumber(&'static str),
    UnknownVersion(String),
    ChecksumMismatch,
    /// The numbers do not describe a lease (hand-edited or damaged).
    Inconsistent(&'static str),
    /// A binary record of the wrong size or version.
    Malformed,
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Io(e) => write!(f, "{e}"),
            LeaseError::MissingField(name) => write!(f, "the field \"{name}\" is missing"),
            LeaseError::NotANumber(name) => write!(f, "the field \"{name}\" is not a number"),
            LeaseError::UnknownVersion(v) => write!(f, "version {v} is not one this snowid reads"),
            LeaseError::ChecksumMismatch => write!(f, "the checksum does not match the contents"),
            LeaseError::Inconsistent(why) => write!(f, "{why}"),
            LeaseError::Malformed => write!(f, "the record is malformed"),
        }
    }
}

/// The binary form's version; a record of another version is refused.
const BINARY_VERSION: u32 = 1;
/// The size of a record's binary form.
pub const BINARY_LEN: usize = 32;

impl Record {
    /// The lease to write when a caller needs the time field `needed_ms` covered: that, and one
    /// window more. Saturates rather than wraps for a need near the end of time.
    pub fn extended(epoch_unix_ms: i64, base_unix_ms: i64, needed_ms: u64) -> Self {
        let end_ms = needed_ms.saturating_add(LEASE_WINDOW_MS + 1);
        Record {
            epoch_unix_ms,
            base_unix_ms,
            lease_end_unix_ms: epoch_unix_ms
                .saturating_add(i64::try_from(end_ms).unwrap_or(i64::MAX)),
        }
    }

    /// The end of the lease as a time field under `epoch_unix_ms`: every ID issued under this
    /// record has a time field below it. `None` when the numbers do not fit, which means the
    /// record is damaged.
    pub fn end_ms_under(&self, epoch_unix_ms: i64) -> Option<u64> {
        u64::try_from(self.lease_end_unix_ms.checked_sub(epoch_unix_ms)?).ok()
    }

    /// Checks that the numbers describe a lease.
    pub fn check(&self) -> Result<(), LeaseError> {
        if self.lease_end_unix_ms < self.epoch_unix_ms {
            return Err(LeaseError::Inconsistent("the lease ends before its epoch"));
        }
        if self.base_unix_ms.checked_sub(self.epoch_unix_ms).is_none()
            || self
                .lease_end_unix_ms
                .checked_sub(self.base_unix_ms)
                .is_none()
        {
            return Err(LeaseError::Inconsistent("the instants are out of range"));
        }
        Ok(())
    }

    /// The binary form, for a WAL record: a version, then the three instants, little-endian.
    pub fn to_bytes(&self) -> [u8; BINARY_LEN] {
        let mut out = [0u8; BINARY_LEN];
        out[0..4].copy_from_slice(&BINARY_VERSION.to_le_bytes());
        out[8..16].copy_from_slice(&self.epoch_unix_ms.to_le_bytes());
        out[16..24].copy_from_slice(&self.base_unix_ms.to_le_bytes());
        out[24..32].copy_from_slice(&self.lease_end_unix_ms.to_le_bytes());
        out
    }

    /// Reads the binary form back, refusing a wrong size, version or inconsistent numbers.
    pub fn from_bytes(bytes: &[u8]) -> Result<Record, LeaseError> {
        let bytes: &[u8; BINARY_LEN] = bytes.try_into().map_err(|_| LeaseError::Malformed)?;
        let field = |at: usize| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(&bytes[at..at + 8]);
            i64::from_le_bytes(raw)
        };
        if bytes[0..4] != BINARY_VERSION.to_le_bytes() || bytes[4..8] != [0; 4] {
            return Err(LeaseError::Malformed);
        }
        let record = Record {
            epoch_unix_ms: field(8),
            base_unix_ms: field(16),
            lease_end_unix_ms: field(24),
        };
        record.check()?;
        Ok(record)
    }

    /// A record covering both: the higher lease end and base, and the later epoch (the one that
    /// constrains a restart).
    pub fn merge(&self, other: &Record) -> Record {
        Record {
            epoch_unix_ms: self.epoch_unix_ms.max(other.epoch_unix_ms),
            base_unix_ms: self.base_unix_ms.max(other.base_unix_ms),
            lease_end_unix_ms: self.lease_end_unix_ms.max(other.lease_end_unix_ms),
        }
    }
}

/// The state file's contents: the newest record, and the seal of the shutdown it was last
/// written at, if it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateFile {
    pub record: Record,
    /// The checkpoint location the server shut down at when it last wrote the file; `None` while
    /// the server runs, and in files written by snowid 0.1.0 (version 1), which had no seal.
    pub sealed_at_lsn: Option<u64>,
    /// Whether the file predates seals (version 1). Such a file cannot be checked for age.
    pub unsealable: bool,
}

const HEADER: &str = "# snowid high-water mark. Do not edit, and never put back an older copy: \
                      the server refuses a file older than its data directory.\n";

impl StateFile {
    /// A file as written while the server runs.
    pub fn running(record: Record) -> StateFile {
        StateFile {
            record,
            sealed_at_lsn: None,
            unsealable: false,
        }
    }

    fn body(&self) -> String {
        let r = &self.record;
        let seal = match self.sealed_at_lsn {
            Some(lsn) => format_lsn(lsn),
            None => "none".into(),
        };
        format!(
            "version=2\nepoch_unix_ms={}\nbase_unix_ms={}\nlease_end_unix_ms={}\nsealed_at_lsn={seal}\n",
            r.epoch_unix_ms, r.base_unix_ms, r.lease_end_unix_ms
        )
    }

    pub fn encode(&self) -> String {
        let body = self.body();
        format!("{HEADER}{body}checksum={:016x}\n", fnv1a(body.as_bytes()))
    }

    pub fn decode(text: &str) -> Result<StateFile, LeaseError> {
        let field = |name: &'static str| -> Result<&str, LeaseError> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .ok_or(LeaseError::MissingField(name))
        };
        let number = |name: &'static str| -> Result<i64, LeaseError> {
            field(name)?
                .parse()
                .map_err(|_| LeaseError::NotANumber(name))
        };
        let record = Record {
            epoch_unix_ms: number("epoch_unix_ms")?,
            base_unix_ms: number("base_unix_ms")?,
            lease_end_unix_ms: number("lease_end_unix_ms")?,
        };
        let (body, file) = match field("version")? {
            // snowid 0.1.0's file: no seal.
            "1" => {
                let body = format!(
                    "version=1\nepoch_unix_ms={}\nbase_unix_ms={}\nlease_end_unix_ms={}\n",
                    record.epoch_unix_ms, record.base_unix_ms, record.lease_end_unix_ms
                );
                (
                    body,
                    StateFile {
                        record,
                        sealed_at_lsn: None,
                        unsealable: true,
                    },
                )
            }
            "2" => {
                let seal = match field("sealed_at_lsn")? {
                    "none" => None,
                    lsn => Some(parse_lsn(lsn).ok_or(LeaseError::NotANumber("sealed_at_lsn"))?),
                };
                let file = StateFile {
                    record,
                    sealed_at_lsn: seal,
                    unsealable: false,
                };
                (file.body(), file)
            }
            other => return Err(LeaseError::UnknownVersion(other.into())),
        };
        if field("checksum")? != format!("{:016x}", fnv1a(body.as_bytes())) {
            return Err(LeaseError::ChecksumMismatch);
        }
        record.check()?;
        Ok(file)
    }
}

/// An LSN as PostgreSQL writes it: `1/A2B3C8`.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let high = u32::from_str_radix(high, 16).ok()?;
    let low = u32::from_str_radix(low, 16).ok()?;
    Some((u64::from(high) << 32) | u64::from(low))
}

/// What the data directory says about how the server last stopped (from `pg_control`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastStop {
    /// The server shut down cleanly, so no WAL will be replayed at start-up.
    pub clean: bool,
    /// The location of the last checkpoint.
    pub checkpoint_lsn: u64,
}

/// How generation may start, given the state file, the configured epoch and how the server
/// last stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Generate. The time base starts at or above `base_floor_unix_ms`; no stamp below
    /// `lease_end_ms` (a time field under the current epoch) may be issued again.
    Resume {
        base_floor_unix_ms: i64,
        lease_end_ms: u64,
    },
    /// The epoch moved later than the one IDs were issued under: new IDs would sort below old.
    EpochMovedLater { recorded_epoch_unix_ms: i64 },
    /// The file exists but cannot be trusted.
    Unreadable { reason: LeaseError },
    /// The file is older than the data directory: it does not carry the seal of the last clean
    /// shutdown, so leases written after it may be lost.
    Stale {
        sealed_at_lsn: Option<u64>,
        checkpoint_lsn: u64,
    },
}

/// Decides how to start from the state file (`Ok(None)`: there is none yet).
pub fn start(
    found: Result<Option<StateFile>, LeaseError>,
    epoch_unix_ms: i64,
    last_stop: LastStop,
) -> Start {
    let file = match found {
        Ok(None) => {
            return Start::Resume {
                base_floor_unix_ms: i64::MIN,
                lease_end_ms: 0,
            }
        }
        Ok(Some(file)) => file,
        Err(reason) => return Start::Unreadable { reason },
    };
    if last_stop.clean && !file.unsealable && file.sealed_at_lsn != Some(last_stop.checkpoint_lsn) {
        return Start::Stale {
            sealed_at_lsn: file.sealed_at_lsn,
            checkpoint_lsn: last_stop.checkpoint_lsn,
        };
    }
    resume_from(&file.record, epoch_unix_ms)
}

/// How generation resumes above a record (from the file, or replayed from WAL).
pub fn resume_from(record: &Record, epoch_unix_ms: i64) -> Start {
    if epoch_unix_ms > record.epoch_unix_ms {
        return Start::EpochMovedLater {
            recorded_epoch_unix_ms: record.epoch_unix_ms,
        };
    }
    // Old time fields are below lease_end - old epoch <= lease_end - new epoch.
    match record.end_ms_under(epoch_unix_ms) {
        Some(lease_end_ms) => Start::Resume {
            base_floor_unix_ms: record.base_unix_ms,
            lease_end_ms,
        },
        None => Start::Unreadable {
            reason: LeaseError::Inconsistent("the lease ends before the epoch"),
        },
    }
}

/// Reads the state file in `dir`: `None` when there is none yet.
pub fn read(dir: &Path) -> Result<Option<StateFile>, LeaseError> {
    match fs::read_to_string(dir.join(FILE_NAME)) {
        Ok(text) => StateFile::decode(&text).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LeaseError::Io(e.to_string())),
    }
}

/// Replaces the state file in `dir` atomically (a temporary file, renamed over it); with
/// `fsync`, durably before returning (the file, then the directory). The file is readable by its
/// owner only.
pub fn write(dir: &Path, file: &StateFile, fsync: bool) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let temp = dir.join(TEMP_NAME);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    out.write_all(file.encode().as_bytes())?;
    if fsync {
        out.sync_all()?;
    }
    fs::rename(&temp, dir.join(FILE_NAME))?;
    if fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// 64-bit FNV-1a: enough to tell a damaged file from a good one.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EPOCH: i64 = 1_767_225_600_000;
    const RECORD: Record = Record {
        epoch_unix_ms: EPOCH,
        base_unix_ms: EPOCH + 50_000,
        lease_end_unix_ms: EPOCH + 52_001,
    };
    const RUNNING: LastStop = LastStop {
        clean: false,
        checkpoint_lsn: 0x1_0000_0028,
    };

    fn clean_at(checkpoint_lsn: u64) -> LastStop {
        LastStop {
            clean: true,
            checkpoint_lsn,
        }
    }

    #[test]
    fn an_extended_lease_covers_the_need_and_a_window() {
        let r = Record::extended(EPOCH, EPOCH + 50_000, 50_300);
        assert_eq!(
            r.lease_end_unix_ms,
            EPOCH + 50_300 + LEASE_WINDOW_MS as i64 + 1
        );
        assert_eq!(r.base_unix_ms, EPOCH + 50_000);
        assert_eq!(r.end_ms_under(EPOCH), Some(50_300 + LEASE_WINDOW_MS + 1));
        let huge = Record::extended(EPOCH, EPOCH, u64::MAX);
        assert_eq!(huge.lease_end_unix_ms, i64::MAX, "saturates, never wraps");
    }

    #[test]
    fn a_restart_resumes_past_the_lease() {
        let start = start(Ok(Some(StateFile::running(RECORD))), EPOCH, RUNNING);
        assert_eq!(
            start,
            Start::Resume {
                base_floor_unix_ms: EPOCH + 50_000,
                lease_end_ms: 52_001
            }
        );
    }

    #[test]
    fn a_first_start_resumes_from_nothing() {
        assert_eq!(
            start(Ok(None), EPOCH, clean_at(5)),
            Start::Resume {
                base_floor_unix_ms: i64::MIN,
                lease_end_ms: 0
            }
        );
    }

    #[test]
    fn a_later_epoch_is_refused_and_an_earlier_one_stays_above_old_ids() {
        let file = Ok(Some(StateFile::running(RECORD)));
        assert_eq!(
            start(file.clone(), EPOCH + 1, RUNNING),
            Start::EpochMovedLater {
                recorded_epoch_unix_ms: EPOCH
            }
        );
        let earlier = EPOCH - 1_000_000;
        let Start::Resume { lease_end_ms, .. } = start(file, earlier, RUNNING) else {
            panic!("an earlier epoch is accepted")
        };
        // Every old ID had a time field below 52_001 under the old epoch; new ones start above.
        assert_eq!(lease_end_ms, 52_001 + 1_000_000);
        let same = start(Ok(Some(StateFile::running(RECORD))), EPOCH, RUNNING);
        assert!(matches!(
            same,
            Start::Resume {
                lease_end_ms: 52_001,
                ..
            }
        ));
    }

    #[test]
    fn a_file_without_the_seal_of_the_last_clean_stop_is_stale() {
        let sealed = |lsn| {
            Ok(Some(StateFile {
                sealed_at_lsn: lsn,
                ..StateFile::running(RECORD)
            }))
        };
        assert!(matches!(
            start(sealed(Some(0x28)), EPOCH, clean_at(0x28)),
            Start::Resume { .. }
        ));
        assert_eq!(
            start(sealed(Some(0x20)), EPOCH, clean_at(0x28)),
            Start::Stale {
                sealed_at_lsn: Some(0x20),
                checkpoint_lsn: 0x28
            }
        );
        assert_eq!(
            start(sealed(None), EPOCH, clean_at(0x28)),
            Start::Stale {
                sealed_at_lsn: None,
                checkpoint_lsn: 0x28
            },
            "a copy taken while the server ran, put back after a clean stop"
        );
        assert!(
            matches!(
                start(sealed(Some(0x20)), EPOCH, RUNNING),
                Start::Resume { .. }
            ),
            "after a crash WAL replay covers what the file lacks"
        );
        let legacy = Ok(Some(StateFile {
            unsealable: true,
            ..StateFile::running(RECORD)
        }));
        assert!(
            matches!(start(legacy, EPOCH, clean_at(0x28)), Start::Resume { .. }),
            "a 0.1.0 file has no seal to check"
        );
    }

    #[test]
    fn damage_is_detected() {
        let text = StateFile::running(RECORD)
            .encode()
            .replace("52001", "52002");
        assert_eq!(StateFile::decode(&text), Err(LeaseError::ChecksumMismatch));
        assert_eq!(
            StateFile::decode("version=2\n"),
            Err(LeaseError::MissingField("epoch_unix_ms"))
        );
        let v9 = StateFile::running(RECORD)
            .encode()
            .replace("version=2", "version=9");
        assert_eq!(
            StateFile::decode(&v9),
            Err(LeaseError::UnknownVersion("9".into()))
        );
        assert!(matches!(
            start(Err(LeaseError::ChecksumMismatch), EPOCH, RUNNING),
            Start::Unreadable { .. }
        ));
    }

    #[test]
    fn numbers_that_do_not_fit_make_the_file_unreadable_not_zero() {
        for record in [
            Record {
                lease_end_unix_ms: EPOCH - 1,
                ..RECORD
            },
            Record {
                base_unix_ms: i64::MIN,
                ..RECORD
            },
            Record {
                epoch_unix_ms: i64::MIN,
                lease_end_unix_ms: i64::MAX,
                base_unix_ms: 0,
            },
        ] {
            let text = StateFile::running(record).encode();
            assert!(
                matches!(StateFile::decode(&text), Err(LeaseError::Inconsistent(_))),
                "{record:?}"
            );
            assert!(
                Record::from_bytes(&record.to_bytes()).is_err(),
                "{record:?}"
            );
        }
        // A later-configured epoch than a record's end: refused, never "start at 0".
        assert!(matches!(
            resume_from(&RECORD, RECORD.lease_end_unix_ms + 1),
            Start::EpochMovedLater { .. }
        ));
        let odd = Record {
            epoch_unix_ms: EPOCH + 100_000,
            ..RECORD
        };
        assert_eq!(odd.end_ms_under(EPOCH + 100_000), None);
        assert!(matches!(
            resume_from(&odd, EPOCH + 100_000),
            Start::Unreadable { .. }
        ));
    }

    #[test]
    fn version_1_files_from_0_1_0_are_read() {
        let body = format!(
            "version=1\nepoch_unix_ms={}\nbase_unix_ms={}\nlease_end_unix_ms={}\n",
            RECORD.epoch_unix_ms, RECORD.base_unix_ms, RECORD.lease_end_unix_ms
        );
        let text = format!(
            "# old header\n{body}checksum={:016x}\n",
            fnv1a(body.as_bytes())
        );
        assert_eq!(
            StateFile::decode(&text),
            Ok(StateFile {
                record: RECORD,
                sealed_at_lsn: None,
                unsealable: true
            })
        );
    }

    #[test]
    fn binary_records_round_trip_and_refuse_garbage() {
        assert_eq!(Record::from_bytes(&RECORD.to_bytes()), Ok(RECORD));
        assert_eq!(Record::from_bytes(&[0; 31]), Err(LeaseError::Malformed));
        let mut wrong_version = RECORD.to_bytes();
        wrong_version[0] = 2;
        assert_eq!(
            Record::from_bytes(&wrong_version),
            Err(LeaseError::Malformed)
        );
        let mut padding = RECORD.to_bytes();
        padding[5] = 1;
        assert_eq!(Record::from_bytes(&padding), Err(LeaseError::Malformed));
    }

    #[test]
    fn a_lease_ending_at_its_epoch_is_valid_and_errors_explain_themselves() {
        let empty = Record {
            epoch_unix_ms: EPOCH,
            base_unix_ms: EPOCH,
            lease_end_unix_ms: EPOCH,
        };
        assert_eq!(empty.check(), Ok(()));
        assert_eq!(empty.end_ms_under(EPOCH), Some(0));
        assert_eq!(
            LeaseError::ChecksumMismatch.to_string(),
            "the checksum does not match the contents"
        );
        assert_eq!(
            LeaseError::MissingField("lease_end").to_string(),
            "the field \"lease_end\" is missing"
        );
    }

    #[test]
    fn merging_keeps_the_higher_of_each() {
        let other = Record {
            epoch_unix_ms: EPOCH - 5,
            base_unix_ms: EPOCH + 60_000,
            lease_end_unix_ms: EPOCH + 10,
        };
        assert_eq!(
            RECORD.merge(&other),
            Record {
                epoch_unix_ms: EPOCH,
                base_unix_ms: EPOCH + 60_000,
                lease_end_unix_ms: EPOCH + 52_001
            }
        );
    }

    #[test]
    fn lsns_print_like_postgresql() {
        assert_eq!(format_lsn(0x1_0A2B_3C8D), "1/A2B3C8D");
        assert_eq!(parse_lsn("1/A2B3C8D"), Some(0x1_0A2B_3C8D));
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("x/0"), None);
    }

    #[test]
    fn write_then_read_round_trips_and_replaces() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("snowid-lease-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(read(&dir), Ok(None));
        write(&dir, &StateFile::running(RECORD), true).unwrap();
        assert_eq!(read(&dir), Ok(Some(StateFile::running(RECORD))));
        let mode = fs::metadata(dir.join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "readable by the server's user only");
        let later = StateFile {
            record: Record {
                lease_end_unix_ms: RECORD.lease_end_unix_ms + 5,
                ..RECORD
            },
            sealed_at_lsn: Some(0xABC),
            unsealable: false,
        };
        write(&dir, &later, false).unwrap();
        assert_eq!(read(&dir), Ok(Some(later)));
        assert!(!dir.join(TEMP_NAME).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unreadable_state_file_is_an_error_not_a_first_start() {
        // Guards against treating any read failure as "no file yet", which would restart every
        // shard from zero, below IDs already handed out.
        let dir = std::env::temp_dir().join(format!("snowid-lease-dir-{}", std::process::id()));
        fs::create_dir_all(dir.join(FILE_NAME)).unwrap();
        assert!(matches!(read(&dir), Err(LeaseError::Io(_))));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_checksum_is_fnv1a_64() {
        // Published FNV-1a 64 test vectors: files written by other builds must still check.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    proptest! {
        #[test]
        fn encode_and_decode_round_trip(epoch in 0i64..i64::MAX / 4, base in 0i64..i64::MAX / 4, extra in 0i64..i64::MAX / 4, seal in proptest::option::of(any::<u64>())) {
            let r = Record { epoch_unix_ms: epoch, base_unix_ms: base, lease_end_unix_ms: epoch + extra };
            let file = StateFile { record: r, sealed_at_lsn: seal, unsealable: false };
            prop_assert_eq!(StateFile::decode(&file.encode()), Ok(file));
            prop_assert_eq!(Record::from_bytes(&r.to_bytes()), Ok(r));
        }
    }
}
