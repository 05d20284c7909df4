//! The state of snowid 0.1.0 and 0.2.0, read once to carry a cluster over to this version.
//!
//! Those versions kept their high-water mark in `$PGDATA/snowid.state`, a text file, and 0.2.0
//! also wrote each lease as a WAL record of its own (info 0x00). This version keeps its state in
//! the pages of [`crate::durable`] instead. On the first generation after the upgrade, the state
//! is created from the old file, judged as 0.2.0 judged it at start-up:
//! - a file that carries the seal of the data directory's last clean shutdown, or one written
//!   before seals existed (0.1.0), is imported: its epoch, time base and lease end;
//! - a file older than the data directory (sealed at another checkpoint, or a copy taken while
//!   the server ran, put back after a clean stop) is imported fenced as stale;
//! - a file that cannot be read is imported fenced as unreadable.
//!
//! A standby of a 0.2.0 primary that already runs this version (standbys are upgraded first)
//! replays the old lease records: they raise the import to come, and are written to the old file
//! durably, as 0.2.0 did, until the primary's first record of this version creates the pages.
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

use crate::durable::{fnv1a, Fence, Header};
use crate::shard_set::ShardSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

/// The state file's name, in the data directory.
pub const FILE_NAME: &str = "snowid.state";
const TEMP_NAME: &str = "snowid.state.tmp";

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

    /// A record covering both: the higher lease end and base, and the earlier epoch, the one
    /// that constrains (IDs issued under it have the larger time fields).
    pub fn merge(&self, other: &Record) -> Record {
        Record {
            epoch_unix_ms: self.epoch_unix_ms.min(other.epoch_unix_ms),
            base_unix_ms: self.base_unix_ms.max(other.base_unix_ms),
            lease_end_unix_ms: self.lease_end_unix_ms.max(other.lease_end_unix_ms),
        }
    }

    /// The record as the new state's header: the lease, the base and the epoch, nothing
    /// released (0.2.0 kept releases in memory only) and no fence.
    pub fn header(&self) -> Header {
        Header {
            epoch_unix_ms: self.epoch_unix_ms,
            base_unix_ms: self.base_unix_ms,
            lease_end_unix_ms: self.lease_end_unix_ms,
            fence: None,
            released: ShardSet::empty(),
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
    /// The fence an earlier start of this version judged the file to deserve, written into it
    /// so that every later start judges the same.
    pub refused: Option<Fence>,
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
            refused: None,
        }
    }

    /// The same file, carrying a verdict.
    pub fn refused_as(self, fence: Fence) -> StateFile {
        StateFile {
            refused: Some(fence),
            ..self
        }
    }

    fn body(&self) -> String {
        let r = &self.record;
        let seal = match self.sealed_at_lsn {
            Some(lsn) => format_lsn(lsn),
            None => "none".into(),
        };
        let refused = match self.refused {
            Some(fence) => format!("refused={}\n", fence.code()),
            None => String::new(),
        };
        format!(
            "version=2\nepoch_unix_ms={}\nbase_unix_ms={}\nlease_end_unix_ms={}\nsealed_at_lsn={seal}\n{refused}",
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
                        refused: None,
                    },
                )
            }
            "2" => {
                let seal = match field("sealed_at_lsn")? {
                    "none" => None,
                    lsn => Some(parse_lsn(lsn).ok_or(LeaseError::NotANumber("sealed_at_lsn"))?),
                };
                let refused = match text.lines().find_map(|l| l.strip_prefix("refused=")) {
                    None => None,
                    Some(code) => Some(
                        code.parse()
                            .ok()
                            .and_then(Fence::from_code)
                            .ok_or(LeaseError::NotANumber("refused"))?,
                    ),
                };
                let file = StateFile {
                    record,
                    sealed_at_lsn: seal,
                    unsealable: false,
                    refused,
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

/// The state to create from the old file (`Ok(None)`: there is none), judged as 0.2.0 judged it
/// at start-up, under the configured epoch for a file that says nothing usable.
pub fn import(
    found: Result<Option<StateFile>, LeaseError>,
    last_stop: LastStop,
    epoch_unix_ms: i64,
) -> Option<Header> {
    let file = match found {
        Ok(None) => return None,
        Ok(Some(file)) => file,
        Err(_) => {
            return Some(Header {
                fence: Some(Fence::Unreadable),
                ..Header::fresh(epoch_unix_ms)
            })
        }
    };
    Some(Header {
        fence: verdict(&file, last_stop),
        ..file.record.header()
    })
}

/// The fence a readable file deserves at this start: the one an earlier start wrote into it, or
/// stale if the server stopped cleanly at a checkpoint the file was not sealed at.
pub fn verdict(file: &StateFile, last_stop: LastStop) -> Option<Fence> {
    let stale =
        last_stop.clean && !file.unsealable && file.sealed_at_lsn != Some(last_stop.checkpoint_lsn);
    file.refused.or(stale.then_some(Fence::Stale))
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
/// `fsync`, durably before returning (the file, then the directory). `mode` is the new file's
/// permissions: the data directory's, which PostgreSQL gives its own files.
pub fn write(dir: &Path, file: &StateFile, fsync: bool, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let temp = dir.join(TEMP_NAME);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
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

/// Raises the file in `dir` to cover a replayed 0.2.0 lease record, durably with `fsync`, so
/// that a restartpoint passing the record loses nothing; an unreadable file is replaced by the
/// record.
pub fn absorb(dir: &Path, record: &Record, fsync: bool, mode: u32) -> io::Result<()> {
    let merged = match read(dir) {
        Ok(Some(file)) => file.record.merge(record),
        _ => *record,
    };
    write(dir, &StateFile::running(merged), fsync, mode)
}

/// Removes the file in `dir` once the state it held lives in the pages, durably with `fsync`.
pub fn remove(dir: &Path, fsync: bool) -> io::Result<()> {
    match fs::remove_file(dir.join(FILE_NAME)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    }
    if fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
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

    fn sealed(lsn: Option<u64>) -> Result<Option<StateFile>, LeaseError> {
        Ok(Some(StateFile {
            sealed_at_lsn: lsn,
            ..StateFile::running(RECORD)
        }))
    }

    #[test]
    fn no_file_means_nothing_to_import() {
        assert_eq!(import(Ok(None), clean_at(5), EPOCH), None);
    }

    #[test]
    fn a_trusted_file_is_imported_with_its_lease_base_and_epoch() {
        let header = import(sealed(Some(0x28)), clean_at(0x28), EPOCH + 7).unwrap();
        assert_eq!(header, RECORD.header());
        assert_eq!(header.fence, None);
        assert_eq!(
            header.epoch_unix_ms, EPOCH,
            "the file's epoch, not the configured one"
        );
        assert_eq!(
            import(sealed(Some(0x20)), RUNNING, EPOCH).unwrap().fence,
            None,
            "after a crash, WAL replay covers what the file lacks"
        );
    }

    #[test]
    fn a_file_without_the_seal_of_the_last_clean_stop_is_imported_fenced() {
        // Guards against an older copy put back: 0.2.0 refused it at start-up, and this version
        // must carry that refusal into the new state, where it lasts until a superuser resumes.
        for seal in [Some(0x20), None] {
            let header = import(sealed(seal), clean_at(0x28), EPOCH).unwrap();
            assert_eq!(header.fence, Some(Fence::Stale), "sealed at {seal:?}");
            assert_eq!(header.lease_end_unix_ms, RECORD.lease_end_unix_ms);
        }
        let legacy = Ok(Some(StateFile {
            unsealable: true,
            ..StateFile::running(RECORD)
        }));
        assert_eq!(
            import(legacy, clean_at(0x28), EPOCH).unwrap().fence,
            None,
            "a 0.1.0 file has no seal to check"
        );
    }

    #[test]
    fn a_verdict_written_into_the_file_outlasts_a_crash() {
        // Guards against a refusal lost to the next start: judged stale after a clean stop, the
        // file is rewritten with its verdict; after a crash (an unclean stop, which on its own
        // would make the file trusted) it is still refused.
        let file = StateFile {
            sealed_at_lsn: Some(0x20),
            ..StateFile::running(RECORD)
        };
        assert_eq!(verdict(&file, clean_at(0x28)), Some(Fence::Stale));
        assert_eq!(verdict(&file, RUNNING), None, "the judgement alone changes");
        let refused = file.refused_as(Fence::Stale);
        let reread = StateFile::decode(&refused.encode()).unwrap();
        assert_eq!(reread, refused);
        for stop in [RUNNING, clean_at(0x20), clean_at(0x28)] {
            assert_eq!(verdict(&reread, stop), Some(Fence::Stale), "{stop:?}");
        }
        let tampered = refused.encode().replace("refused=1", "refused=0");
        assert!(
            StateFile::decode(&tampered).is_err(),
            "the verdict is under the checksum"
        );
    }

    #[test]
    fn an_unreadable_file_is_imported_fenced_not_as_a_first_start() {
        let header = import(Err(LeaseError::ChecksumMismatch), RUNNING, EPOCH).unwrap();
        assert_eq!(header.fence, Some(Fence::Unreadable));
        assert_eq!(header.epoch_unix_ms, EPOCH);
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
                unsealable: true,
                refused: None
            })
        );
    }

    #[test]
    fn binary_records_of_0_2_0_round_trip_and_refuse_garbage() {
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
    fn merging_keeps_the_higher_lease_and_base_and_the_earlier_epoch() {
        // Guards against the 0.2.0 merge, which kept the later epoch: a standby that replayed a
        // lease taken under an earlier epoch must remember the earlier one, which constrains.
        let other = Record {
            epoch_unix_ms: EPOCH - 5,
            base_unix_ms: EPOCH + 60_000,
            lease_end_unix_ms: EPOCH + 10,
        };
        let merged = Record {
            epoch_unix_ms: EPOCH - 5,
            base_unix_ms: EPOCH + 60_000,
            lease_end_unix_ms: EPOCH + 52_001,
        };
        assert_eq!(RECORD.merge(&other), merged);
        assert_eq!(other.merge(&RECORD), merged);
    }

    #[test]
    fn lsns_print_like_postgresql() {
        assert_eq!(format_lsn(0x1_0A2B_3C8D), "1/A2B3C8D");
        assert_eq!(parse_lsn("1/A2B3C8D"), Some(0x1_0A2B_3C8D));
        assert_eq!(parse_lsn("0/0"), Some(0));
        assert_eq!(parse_lsn("x/0"), None);
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("snowid-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn write_absorb_read_and_remove() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("legacy");
        assert_eq!(read(&dir), Ok(None));
        write(&dir, &StateFile::running(RECORD), true, 0o640).unwrap();
        assert_eq!(read(&dir), Ok(Some(StateFile::running(RECORD))));
        let mode = fs::metadata(dir.join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o777,
            0o640,
            "the mode the data directory's files have"
        );

        let replayed = Record {
            epoch_unix_ms: EPOCH - 1,
            base_unix_ms: EPOCH,
            lease_end_unix_ms: EPOCH + 90_000,
        };
        absorb(&dir, &replayed, false, 0o600).unwrap();
        assert_eq!(read(&dir).unwrap().unwrap().record, RECORD.merge(&replayed));
        assert!(!dir.join(TEMP_NAME).exists());
        remove(&dir, true).unwrap();
        assert_eq!(read(&dir), Ok(None));
        remove(&dir, true).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unreadable_state_file_is_an_error_not_a_first_start() {
        // Guards against treating any read failure as "no file yet", which would restart every
        // shard from zero, below IDs already handed out.
        let dir = temp_dir("legacy-dir");
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
            let file = StateFile { record: r, sealed_at_lsn: seal, unsealable: false, refused: None };
            prop_assert_eq!(StateFile::decode(&file.encode()), Ok(file));
            prop_assert_eq!(Record::from_bytes(&r.to_bytes()), Ok(r));
        }
    }
}
