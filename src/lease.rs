//! The persisted high-water mark: a lease of future time, kept in `$PGDATA/snowid.state`.
//!
//! The promise it keeps: every ID ever issued on this cluster has a time field below
//! `lease_end_unix_ms - epoch_unix_ms` of the record on disk. A generator may only hand out a
//! stamp whose millisecond the lease covers; to go further, one caller writes a longer lease
//! (atomically: a temporary file, fsync, rename, fsync of the directory) before anyone may use
//! it. Under sustained load that is about one write per [`LEASE_WINDOW_MS`].
//!
//! At start-up, and after a backend crash resets shared memory, every shard resumes at the end
//! of the recorded lease, and the time base resumes no lower than the recorded base, whatever
//! the wall clock says. Shared memory can be lost; the file cannot.
//!
//! The record also names the epoch it was written under. A later epoch would make new IDs
//! smaller than old ones, so generation refuses; an earlier one keeps them larger, provably, and
//! is accepted.
//!
//! The file is text, for operators:
//!
//! ```text
//! # snowid high-water mark. Do not edit; removing it lets a clock set back reissue old IDs.
//! version=1
//! epoch_unix_ms=1767225600000
//! base_unix_ms=1795000000000
//! lease_end_unix_ms=1795000002000
//! checksum=8c1f5cbd2fb4a4f1
//! ```

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

pub const FILE_NAME: &str = "snowid.state";
const TEMP_NAME: &str = "snowid.state.tmp";
/// How much time beyond what is needed one lease write covers.
pub const LEASE_WINDOW_MS: i64 = 1000;

/// One write of the high-water mark. All instants are Unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The epoch the IDs under this lease were issued with.
    pub epoch_unix_ms: i64,
    /// The time base when the lease was written.
    pub base_unix_ms: i64,
    /// No ID issued so far has a time at or past this instant.
    pub lease_end_unix_ms: i64,
}

impl Record {
    /// The lease to write when a caller needs the time field `needed_ms` covered: that, and one
    /// window more. (Covering the whole permitted lead instead would write less often under
    /// bursts, but a restart would then wait for the clock to pass all of it.)
    pub fn extended(epoch_unix_ms: i64, base_unix_ms: i64, needed_ms: u64) -> Self {
        Record {
            epoch_unix_ms,
            base_unix_ms,
            lease_end_unix_ms: epoch_unix_ms + needed_ms as i64 + LEASE_WINDOW_MS + 1,
        }
    }

    fn body(&self) -> String {
        format!(
            "version=1\nepoch_unix_ms={}\nbase_unix_ms={}\nlease_end_unix_ms={}\n",
            self.epoch_unix_ms, self.base_unix_ms, self.lease_end_unix_ms
        )
    }

    pub fn encode(&self) -> String {
        let body = self.body();
        format!(
            "# snowid high-water mark. Do not edit; removing it lets a clock set back reissue old IDs.\n\
             {body}checksum={:016x}\n",
            fnv1a(body.as_bytes())
        )
    }

    pub fn decode(text: &str) -> Result<Record, String> {
        let field = |name: &str| -> Result<&str, String> {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
                .ok_or_else(|| format!("the field \"{name}\" is missing"))
        };
        let number = |name: &str| -> Result<i64, String> {
            field(name)?
                .parse()
                .map_err(|_| format!("the field \"{name}\" is not a number"))
        };
        if field("version")? != "1" {
            return Err(format!(
                "version {} is not one this snowid reads",
                field("version")?
            ));
        }
        let record = Record {
            epoch_unix_ms: number("epoch_unix_ms")?,
            base_unix_ms: number("base_unix_ms")?,
            lease_end_unix_ms: number("lease_end_unix_ms")?,
        };
        if field("checksum")? != format!("{:016x}", fnv1a(record.body().as_bytes())) {
            return Err("the checksum does not match the contents".into());
        }
        Ok(record)
    }
}

/// How generation may start, given the record on disk and the configured epoch.
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
    Unreadable { reason: String },
}

pub fn start(found: Result<Option<Record>, String>, epoch_unix_ms: i64) -> Start {
    match found {
        Ok(None) => Start::Resume {
            base_floor_unix_ms: i64::MIN,
            lease_end_ms: 0,
        },
        Ok(Some(record)) if epoch_unix_ms > record.epoch_unix_ms => Start::EpochMovedLater {
            recorded_epoch_unix_ms: record.epoch_unix_ms,
        },
        Ok(Some(record)) => Start::Resume {
            base_floor_unix_ms: record.base_unix_ms,
            // Old time fields are below lease_end - old epoch <= lease_end - new epoch.
            lease_end_ms: (record.lease_end_unix_ms - epoch_unix_ms).max(0) as u64,
        },
        Err(reason) => Start::Unreadable { reason },
    }
}

/// Reads the record in `dir`: `None` when there is none yet.
pub fn read(dir: &Path) -> Result<Option<Record>, String> {
    match fs::read_to_string(dir.join(FILE_NAME)) {
        Ok(text) => Record::decode(&text).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Replaces the record in `dir` atomically; with `fsync`, durably before returning.
pub fn write(dir: &Path, record: &Record, fsync: bool) -> io::Result<()> {
    let temp = dir.join(TEMP_NAME);
    let mut file = File::create(&temp)?;
    file.write_all(record.encode().as_bytes())?;
    if fsync {
        file.sync_all()?;
    }
    fs::rename(&temp, dir.join(FILE_NAME))?;
    if fsync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// 64-bit FNV-1a: enough to tell a damaged file from a good one.
fn fnv1a(bytes: &[u8]) -> u64 {
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

    #[test]
    fn an_extended_lease_covers_the_need_and_a_window() {
        let r = Record::extended(EPOCH, EPOCH + 50_000, 50_300);
        assert_eq!(r.lease_end_unix_ms, EPOCH + 50_300 + LEASE_WINDOW_MS + 1);
        assert_eq!(r.base_unix_ms, EPOCH + 50_000);
    }

    #[test]
    fn a_restart_resumes_past_the_lease() {
        let start = start(Ok(Some(RECORD)), EPOCH);
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
            start(Ok(None), EPOCH),
            Start::Resume {
                base_floor_unix_ms: i64::MIN,
                lease_end_ms: 0
            }
        );
    }

    #[test]
    fn a_later_epoch_is_refused_and_an_earlier_one_stays_above_old_ids() {
        assert_eq!(
            start(Ok(Some(RECORD)), EPOCH + 1),
            Start::EpochMovedLater {
                recorded_epoch_unix_ms: EPOCH
            }
        );
        let earlier = EPOCH - 1_000_000;
        let Start::Resume { lease_end_ms, .. } = start(Ok(Some(RECORD)), earlier) else {
            panic!("an earlier epoch is accepted")
        };
        // Every old ID had a time field below 52_001 under the old epoch; new ones start above.
        assert_eq!(lease_end_ms, 52_001 + 1_000_000);
        assert!(lease_end_ms >= (RECORD.lease_end_unix_ms - EPOCH) as u64);
    }

    #[test]
    fn damage_is_detected() {
        let text = RECORD.encode().replace("52001", "52002");
        assert!(Record::decode(&text).unwrap_err().contains("checksum"));
        assert!(Record::decode("version=1\n")
            .unwrap_err()
            .contains("missing"));
        assert!(Record::decode(&RECORD.encode().replace("version=1", "version=9")).is_err());
        assert!(matches!(
            start(Err("bad".into()), EPOCH),
            Start::Unreadable { .. }
        ));
    }

    #[test]
    fn write_then_read_round_trips_and_replaces() {
        let dir = std::env::temp_dir().join(format!("snowid-lease-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(read(&dir), Ok(None));
        write(&dir, &RECORD, true).unwrap();
        assert_eq!(read(&dir), Ok(Some(RECORD)));
        let later = Record {
            lease_end_unix_ms: RECORD.lease_end_unix_ms + 5,
            ..RECORD
        };
        write(&dir, &later, false).unwrap();
        assert_eq!(read(&dir), Ok(Some(later)));
        assert!(!dir.join(TEMP_NAME).exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #[test]
        fn encode_and_decode_round_trip(epoch in 0i64..i64::MAX / 4, base in 0i64..i64::MAX / 4, end in 0i64..i64::MAX / 4) {
            let r = Record { epoch_unix_ms: epoch, base_unix_ms: base, lease_end_unix_ms: end };
            prop_assert_eq!(Record::decode(&r.encode()), Ok(r));
        }
    }
}
