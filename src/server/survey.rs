//! The highest snowid key of every database of the cluster, for a resume that lifts a fence
//! (or `snowid_resume_above_columns()`): a fence lifts only above what every database holds,
//! not just the one the statement runs in.
//!
//! In each database, the keys are the values of every `bigint` column (or domain over
//! `bigint`) of an ordinary or partitioned table whose default calls `snowid_next`, or that a
//! `snowid_fill_id` trigger fills; the highest is read from the table and everything below it
//! (partitions, inheritance children), so that rows that came in through a parent count. Views
//! and other relations are not read: reading them would run code their owners wrote, as the
//! superuser.
//!
//! The caller's own database is read in the caller's transaction. Each other one is read by a
//! background worker connected to it (as the bootstrap superuser, allowed into databases that
//! refuse connections), one at a time; the worker writes its report into a dynamic
//! shared-memory segment the caller made, and the caller reads it once the worker has exited.
//! A cancel or `statement_timeout` of the caller stops the worker it waits for; a worker that
//! outlives its caller finds the segment gone, or writes into one nobody reads. Every query runs
//! with `search_path` set to `pg_catalog, pg_temp`, whatever the database or role sets.

use crate::errors;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The most a report may take in its segment; a database with more columns than fit is
/// reported with as many as fit, and its highest key over all of them.
const REPORT_BYTES: usize = 60_000;

/// A column holding snowid keys, and its highest value (`None` for an empty table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumn {
    pub table: String,
    pub column: String,
    pub max_id: Option<i64>,
}

/// What one database holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseKeys {
    pub database: String,
    /// Whether snowid is installed there.
    pub installed: bool,
    /// The columns, as many as fit in a report.
    pub columns: Vec<KeyColumn>,
    /// How many more columns there are than `columns` lists.
    pub unlisted: u64,
    /// The highest key over every column.
    pub highest: Option<i64>,
}

/// Reads every database of the cluster, raising an error (and changing nothing) if one of them
/// cannot be read.
pub fn every_database() -> Vec<DatabaseKeys> {
    let databases = Spi::connect(|client| {
        client
            .select(
                "SELECT oid, datname::pg_catalog.text FROM pg_catalog.pg_database \
                 WHERE datconnlimit OPERATOR(pg_catalog.<>) -2 ORDER BY datname",
                None,
                &[],
            )?
            .map(|row| {
                Ok((
                    row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                    row.get::<String>(2)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
    })
    .unwrap_or_else(|e| errors::catalog_read_failed(&e));
    // SAFETY: a plain read of this backend's database, set before it runs SQL.
    let here = unsafe { pg_sys::MyDatabaseId };
    databases
        .into_iter()
        .map(|(oid, name)| {
            let report = if oid == here {
                this_database()
            } else {
                in_worker(oid, &name)
            };
            report.unwrap_or_else(|reason| errors::survey_failed(&name, &reason))
        })
        .collect()
}

/// Reads the current database, in the current transaction.
fn this_database() -> Result<DatabaseKeys, String> {
    let _path = SafeSearchPath::set();
    Spi::connect(|client| {
        let database = client
            .select("SELECT pg_catalog.current_database()::pg_catalog.text", None, &[])?
            .first()
            .get::<String>(1)?
            .unwrap_or_default();
        let installed = !client
            .select(
                "SELECT 1 FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'snowid'",
                None,
                &[],
            )?
            .is_empty();
        let mut keys = DatabaseKeys {
            database,
            installed,
            columns: Vec::new(),
            unlisted: 0,
            highest: None,
        };
        if !installed {
            return Ok(keys);
        }
        let columns = client
            .select(KEY_COLUMNS, None, &[])?
            .map(|row| {
                Ok((
                    row.get::<String>(1)?.unwrap_or_default(),
                    row.get::<String>(2)?.unwrap_or_default(),
                    row.get::<String>(3)?.unwrap_or_default(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()?;
        for (table, column, query) in columns {
            let max_id = client
                .select(&query, None, &[])?
                .first()
                .get::<i64>(1)?;
            keys.highest = keys.highest.max(max_id);
            keys.columns.push(KeyColumn {
                table,
                column,
                max_id,
            });
        }
        Ok(keys)
    })
    .map_err(|e: pgrx::spi::Error| e.to_string())
}

/// Every key column of the current database: its table (qualified and quoted), its name, and
/// the query that reads its highest value, from the table and everything below it.
const KEY_COLUMNS: &str = r#"
WITH snowid_functions AS (
    SELECT p.oid, p.proname
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
    JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
    WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
      AND d.deptype OPERATOR(pg_catalog.=) 'e'
      AND e.extname OPERATOR(pg_catalog.=) 'snowid'
), key_columns AS (
    SELECT ad.adrelid AS rel, ad.adnum AS num
    FROM pg_catalog.pg_attrdef ad
    JOIN pg_catalog.pg_depend dep
      ON dep.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_attrdef'::pg_catalog.regclass
     AND dep.objid OPERATOR(pg_catalog.=) ad.oid
     AND dep.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
    JOIN snowid_functions f
      ON f.oid OPERATOR(pg_catalog.=) dep.refobjid AND f.proname OPERATOR(pg_catalog.=) 'snowid_next'
    UNION
    SELECT t.tgrelid, a.attnum
    FROM pg_catalog.pg_trigger t
    JOIN snowid_functions f
      ON f.oid OPERATOR(pg_catalog.=) t.tgfoid AND f.proname OPERATOR(pg_catalog.=) 'snowid_fill_id'
    JOIN pg_catalog.pg_attribute a
      ON a.attrelid OPERATOR(pg_catalog.=) t.tgrelid
     AND a.attname OPERATOR(pg_catalog.=) pg_catalog.convert_from(
            pg_catalog.substr(t.tgargs, 1, GREATEST(
                pg_catalog.position(t.tgargs, '\x00'::pg_catalog.bytea) OPERATOR(pg_catalog.-) 1, 0)),
            pg_catalog.getdatabaseencoding())::pg_catalog.name
)
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname),
       a.attname::pg_catalog.text,
       pg_catalog.format('SELECT pg_catalog.max(%I::pg_catalog.int8) FROM %I.%I',
                         a.attname, n.nspname, c.relname)
FROM key_columns k
JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) k.rel
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
JOIN pg_catalog.pg_attribute a
  ON a.attrelid OPERATOR(pg_catalog.=) k.rel AND a.attnum OPERATOR(pg_catalog.=) k.num
JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) a.atttypid
WHERE c.relkind IN ('r', 'p')
  AND NOT a.attisdropped
  AND (ty.oid OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype
       OR ty.typbasetype OPERATOR(pg_catalog.=) 'pg_catalog.int8'::pg_catalog.regtype)
ORDER BY 1, 2
"#;

/// `search_path` set to `pg_catalog, pg_temp` until dropped (or until the transaction ends), as
/// a function's `SET` clause would do it.
struct SafeSearchPath(std::ffi::c_int);

impl SafeSearchPath {
    fn set() -> SafeSearchPath {
        // SAFETY: the sequence PostgreSQL's own code uses for a temporary setting; the strings
        // are NUL-terminated.
        unsafe {
            let level = pg_sys::NewGUCNestLevel();
            pg_sys::set_config_option(
                c"search_path".as_ptr(),
                c"pg_catalog, pg_temp".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
            SafeSearchPath(level)
        }
    }
}

impl Drop for SafeSearchPath {
    fn drop(&mut self) {
        // SAFETY: undoes the nest level `set` opened (an error's abort would undo it too).
        unsafe { pg_sys::AtEOXact_GUC(true, self.0) };
    }
}

/// The segment a worker writes its report into.
#[repr(C)]
struct Channel {
    database: pg_sys::Oid,
    /// Set last, once the report is written.
    written: std::sync::atomic::AtomicBool,
    len: u32,
    bytes: [u8; REPORT_BYTES],
}

/// Reads another database with a background worker.
fn in_worker(database: pg_sys::Oid, name: &str) -> Result<DatabaseKeys, String> {
    // SAFETY: dsm_create raises an error rather than return null without the flag that allows
    // it; the segment is zeroed and sized for a Channel, and lives until detached or until the
    // transaction ends.
    let (segment, channel) = unsafe {
        let segment = pg_sys::dsm_create(size_of::<Channel>(), 0);
        let channel = pg_sys::dsm_segment_address(segment).cast::<Channel>();
        std::ptr::write_bytes(channel, 0, 1);
        (*channel).database = database;
        (segment, channel)
    };
    // SAFETY: a plain read of the segment's handle and of this process's PID.
    let (handle, pid) = unsafe { (pg_sys::dsm_segment_handle(segment), pg_sys::MyProcPid) };
    let builder = BackgroundWorkerBuilder::new(&format!("snowid reads database {name}"))
        .set_type("snowid")
        .set_library("snowid")
        .set_function("snowid_survey_worker")
        .set_argument(Some(pg_sys::Datum::from(handle)))
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_notify_pid(pid);
    let mut worker: pg_sys::BackgroundWorker = (&builder).into();
    let mut handle = std::ptr::null_mut();
    // SAFETY: a plain registration; PostgreSQL sets the handle when it returns true.
    if !unsafe { pg_sys::RegisterDynamicBackgroundWorker(&mut worker, &mut handle) } {
        errors::survey_needs_workers(name);
    }
    let _running = RunningWorker(handle);
    // SAFETY: the handle is valid; the wait returns once the worker has exited (or never
    // started), and raises an error on a cancel, which `_running` answers by stopping it.
    unsafe { pg_sys::WaitForBackgroundWorkerShutdown(handle) };
    // SAFETY: the worker has exited: the segment is read by this process alone.
    let report = unsafe {
        let channel = &*channel;
        if channel.written.load(std::sync::atomic::Ordering::Acquire) {
            DatabaseKeys::from_bytes(&channel.bytes[..channel.len as usize])
        } else {
            Err("its background worker ended without a report; the server log says why".into())
        }
    };
    // SAFETY: the segment is this process's, and nothing refers to it any more.
    unsafe { pg_sys::dsm_detach(segment) };
    report
}

/// A worker being waited for, stopped when this is dropped: at once if the wait ends with an
/// error; after it has exited (when stopping it does nothing) otherwise.
struct RunningWorker(*mut pg_sys::BackgroundWorkerHandle);

impl Drop for RunningWorker {
    fn drop(&mut self) {
        // SAFETY: the handle is valid; terminating a worker that has exited does nothing.
        unsafe { pg_sys::TerminateBackgroundWorker(self.0) };
    }
}

/// The background worker that reads one database: connects to it, reads it in a transaction
/// of its own, and writes the report (or why it could not) into its caller's segment.
///
/// # Safety
///
/// Started by PostgreSQL as a dynamic background worker, with the handle of a segment made by
/// [`in_worker`] as its argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_survey_worker(argument: pg_sys::Datum) {
    // SAFETY: PostgreSQL's default handlers stay (SIGTERM ends the worker with FATAL).
    unsafe { pg_sys::BackgroundWorkerUnblockSignals() };
    // SAFETY: attaching returns null if the caller has gone and the segment with it.
    let segment = unsafe { pg_sys::dsm_attach(argument.value() as pg_sys::dsm_handle) };
    if segment.is_null() {
        return;
    }
    // SAFETY: the segment holds a Channel; the caller does not touch it until this worker exits.
    let channel = unsafe { &mut *pg_sys::dsm_segment_address(segment).cast::<Channel>() };
    // SAFETY: connects this worker to the database as the bootstrap superuser; a database that
    // refuses connections (a template) is read all the same.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnectionByOid(
            channel.database,
            pg_sys::InvalidOid,
            pg_sys::BGWORKER_BYPASS_ALLOWCONN,
        )
    };
    let report = in_own_transaction().and_then(|keys| keys.to_bytes(REPORT_BYTES));
    let bytes = match report {
        Ok(bytes) => bytes,
        Err(reason) => failure_bytes(&reason),
    };
    channel.bytes[..bytes.len()].copy_from_slice(&bytes);
    channel.len = bytes.len() as u32;
    channel
        .written
        .store(true, std::sync::atomic::Ordering::Release);
}

/// Reads the worker's database in a transaction of its own; an error becomes its message.
fn in_own_transaction() -> Result<DatabaseKeys, String> {
    // SAFETY: the standard sequence for a transaction in a background worker.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
    }
    PgTryBuilder::new(|| {
        let keys = this_database();
        // SAFETY: ends the transaction begun above.
        unsafe {
            pg_sys::PopActiveSnapshot();
            pg_sys::CommitTransactionCommand();
        }
        keys
    })
    .catch_others(|caught| {
        // SAFETY: the error is caught; aborting cleans up the transaction and its snapshots.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(match caught {
            pg_sys::panic::CaughtError::PostgresError(e)
            | pg_sys::panic::CaughtError::ErrorReport(e)
            | pg_sys::panic::CaughtError::RustPanic { ereport: e, .. } => e.message().to_string(),
        })
    })
    .execute()
}

/// A report's bytes: fields separated by NUL (which no name holds). The first four say whether
/// snowid is installed, the database, the count of unlisted columns and the highest key; then
/// three per column.
impl DatabaseKeys {
    fn to_bytes(&self, limit: usize) -> Result<Vec<u8>, String> {
        let number = |n: Option<i64>| n.map_or(String::new(), |n| n.to_string());
        let mut fields = vec![
            if self.installed { "ok" } else { "none" }.to_string(),
            self.database.clone(),
            String::new(),
            number(self.highest),
        ];
        let head: usize = fields.iter().map(|f| f.len() + 1).sum::<usize>() + 24;
        let mut size = head;
        let mut listed = 0;
        for column in &self.columns {
            let row = [
                column.table.clone(),
                column.column.clone(),
                number(column.max_id),
            ];
            let row_size: usize = row.iter().map(|f| f.len() + 1).sum();
            if size + row_size > limit {
                break;
            }
            size += row_size;
            fields.extend(row);
            listed += 1;
        }
        fields[2] = (self.unlisted + (self.columns.len() - listed) as u64).to_string();
        Ok(fields.join("\0").into_bytes())
    }

    fn from_bytes(bytes: &[u8]) -> Result<DatabaseKeys, String> {
        let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
        let fields: Vec<&str> = text.split('\0').collect();
        let bad = || "its background worker wrote a report that cannot be read".to_string();
        let number = |f: &str| -> Result<Option<i64>, String> {
            match f {
                "" => Ok(None),
                f => f.parse().map(Some).map_err(|_| bad()),
            }
        };
        match fields.as_slice() {
            ["failed", reason] => Err(reason.to_string()),
            [status @ ("ok" | "none"), database, unlisted, highest, rows @ ..]
                if rows.len() % 3 == 0 =>
            {
                Ok(DatabaseKeys {
                    database: database.to_string(),
                    installed: *status == "ok",
                    unlisted: unlisted.parse().map_err(|_| bad())?,
                    highest: number(highest)?,
                    columns: rows
                        .chunks(3)
                        .map(|r| {
                            Ok(KeyColumn {
                                table: r[0].to_string(),
                                column: r[1].to_string(),
                                max_id: number(r[2])?,
                            })
                        })
                        .collect::<Result<_, String>>()?,
                })
            }
            _ => Err(bad()),
        }
    }
}

/// The bytes of a report that says why the database could not be read.
fn failure_bytes(reason: &str) -> Vec<u8> {
    let reason: String = reason.replace('\0', " ").chars().take(2000).collect();
    format!("failed\0{reason}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(columns: usize) -> DatabaseKeys {
        DatabaseKeys {
            database: "shop".into(),
            installed: true,
            columns: (0..columns)
                .map(|i| KeyColumn {
                    table: format!("public.\"odd\ttable {i}\""),
                    column: "id".into(),
                    max_id: (i % 2 == 0).then_some(i as i64 * 1000),
                })
                .collect(),
            unlisted: 0,
            highest: Some(99_000),
        }
    }

    #[test]
    fn a_report_comes_back_as_it_was_written() {
        let written = keys(3);
        let bytes = written.to_bytes(REPORT_BYTES).unwrap();
        assert_eq!(DatabaseKeys::from_bytes(&bytes), Ok(written));
        let none = DatabaseKeys {
            installed: false,
            columns: vec![],
            highest: None,
            ..keys(0)
        };
        let bytes = none.to_bytes(REPORT_BYTES).unwrap();
        assert_eq!(DatabaseKeys::from_bytes(&bytes), Ok(none));
    }

    #[test]
    fn a_report_too_long_lists_what_fits_and_keeps_the_highest() {
        let written = keys(5_000);
        let bytes = written.to_bytes(2_000).unwrap();
        assert!(bytes.len() <= 2_000);
        let read = DatabaseKeys::from_bytes(&bytes).unwrap();
        assert!(!read.columns.is_empty() && read.columns.len() < 5_000);
        assert_eq!(read.columns.len() as u64 + read.unlisted, 5_000);
        assert_eq!(read.highest, Some(99_000));
    }

    #[test]
    fn a_failure_carries_its_reason() {
        let bytes = failure_bytes("permission denied for table t");
        assert_eq!(
            DatabaseKeys::from_bytes(&bytes),
            Err("permission denied for table t".to_string())
        );
        assert!(DatabaseKeys::from_bytes(b"garbage").is_err());
    }
}
