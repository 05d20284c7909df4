//! The public IDs' keys as this process holds them.
//!
//! The keys are kept as PostgreSQL keeps its TLS key: in a file, named by
//! `snowid.mask_key_file` (relative to the data directory, reloadable), that the server's user
//! alone can read (refused otherwise, as PostgreSQL refuses such an `ssl_key_file`). No SQL
//! statement, setting, error or log line carries a key.
//!
//! - **When the file is read.** The setting's check hook reads and parses the file, and its
//!   assign hook installs what was parsed: in the postmaster at start (a file that cannot be
//!   used stops the server, see [`super::settings`]) and at each reload, and in each backend at
//!   each reload it processes, between statements. A backend inherits the postmaster's keys
//!   when it starts, and keeps what it parsed until its next reload: the mask's functions
//!   never read the file. A reload that meets a file it cannot use keeps the last good keys in
//!   every process, and logs why. A parallel worker does not read the file as it takes its
//!   leader's settings: it keeps the keys it was started with, the postmaster's.
//! - **Which keys a database uses.** Its own lines, or the default's derived for its name
//!   (`snowid_core::mask::keys`), resolved at the first call after each reload (the database's
//!   name needs the catalog), with each version's AES key schedule.

use crate::errors;
use pgrx::pg_sys;
use snowid_core::mask::keys::FILE_MAX_BYTES;
use snowid_core::mask::keys::{check_permissions, DatabaseKeys, KeyFile, PermissionError};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;

/// What the setting names: no file, or the keys parsed from one.
type Loaded = Option<Rc<KeyFile>>;

/// This process's keys, once the setting is defined (snowid was preloaded).
struct Installed {
    file: Loaded,
    /// This database's keys, resolved at the first call after `file` was installed: `None`
    /// until then; `Some(None)` when the file has none for it.
    database: Option<Option<Rc<DatabaseKeys>>>,
}

thread_local! {
    static INSTALLED: RefCell<Option<Installed>> = const { RefCell::new(None) };
    /// Files the check hook parsed, by the number it gave the assign hook in `extra`.
    static CHECKED: RefCell<BTreeMap<u64, Loaded>> = const { RefCell::new(BTreeMap::new()) };
    static NEXT_CHECK: Cell<u64> = const { Cell::new(1) };
}

/// Why the key file cannot be used: what the error says, and its detail. Neither carries
/// anything read from the file.
pub struct LoadError {
    pub message: String,
    pub detail: Option<String>,
}

/// Reads and parses the key file at `path` (relative to the data directory); `None` for an
/// empty path (no file).
pub fn load(path: &str) -> Result<Loaded, LoadError> {
    if path.is_empty() {
        return Ok(None);
    }
    let plain = |message: String| LoadError {
        message,
        detail: None,
    };
    let io = |e: std::io::Error| plain(format!("could not read mask key file \"{path}\": {e}"));
    let metadata = std::fs::metadata(path)
        .map_err(|e| plain(format!("could not access mask key file \"{path}\": {e}")))?;
    if !metadata.is_file() {
        return Err(plain(format!(
            "mask key file \"{path}\" is not a regular file"
        )));
    }
    // SAFETY: geteuid cannot fail.
    let server_user = unsafe { libc::geteuid() };
    match check_permissions(metadata.uid(), metadata.mode(), server_user) {
        Ok(()) => {}
        Err(PermissionError::Owner) => {
            return Err(plain(format!(
                "mask key file \"{path}\" must be owned by the database user or root"
            )))
        }
        Err(_) => {
            return Err(LoadError {
                message: format!("mask key file \"{path}\" has group or world access"),
                detail: Some(
                    "File must have permissions u=rw (0600) or less if owned by the database \
                     user, or permissions u=rw,g=r (0640) or less if owned by root."
                        .into(),
                ),
            })
        }
    }
    let mut bytes = zeroize::Zeroizing::new(Vec::new());
    std::fs::File::open(path)
        .and_then(|file| file.take(FILE_MAX_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    KeyFile::parse(&bytes)
        .map(|file| Some(Rc::new(file)))
        .map_err(|e| LoadError {
            message: format!("invalid mask key file \"{path}\""),
            detail: Some(errors::detail_line(&e.to_string())),
        })
}

/// The check hook of `snowid.mask_key_file`: reads and parses the file it names, and hands
/// what it parsed to [`assign_key_file`] through `extra`. A file that cannot be used is refused
/// with the reason (PostgreSQL then keeps the keys in force, or stops at start-up).
///
/// # Safety
///
/// Called by PostgreSQL's GUC machinery with a valid `newval` and `extra`.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn check_key_file(
    newval: *mut *mut c_char,
    extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: PostgreSQL passes a valid pointer to a NUL-terminated string or to null.
    let path = unsafe {
        (*newval)
            .as_ref()
            .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    // SAFETY: a plain read of a flag PostgreSQL sets while a parallel worker starts.
    let loaded = if unsafe { pg_sys::InitializingParallelWorker } {
        // A parallel worker keeps the keys it was started with rather than read the file as it
        // is now, which its leader may not have reloaded yet.
        Ok(INSTALLED.with_borrow(|i| i.as_ref().and_then(|i| i.file.clone())))
    } else {
        load(&path)
    };
    match loaded {
        Ok(loaded) => {
            let number = NEXT_CHECK.replace(NEXT_CHECK.get() + 1);
            CHECKED.with_borrow_mut(|checked| checked.insert(number, loaded));
            // SAFETY: PostgreSQL frees `extra` with its own allocator: malloc's in 15,
            // guc_malloc's after.
            unsafe {
                #[cfg(feature = "pg15")]
                let chunk = libc::malloc(size_of::<u64>()).cast::<u64>();
                #[cfg(not(feature = "pg15"))]
                let chunk = pg_sys::guc_malloc(pg_sys::LOG as i32, size_of::<u64>()).cast::<u64>();
                if chunk.is_null() {
                    return false;
                }
                chunk.write_unaligned(number);
                *extra = chunk.cast();
            }
            true
        }
        Err(e) => {
            let message = CString::new(e.message).unwrap_or_default();
            let detail = e.detail.and_then(|d| CString::new(d).ok());
            let hint = CString::new(errors::MASK_KEY_FILE_HINT).unwrap_or_default();
            // SAFETY: PostgreSQL reads these palloc'd strings right after the hook returns.
            unsafe {
                pg_sys::GUC_check_errmsg_string = pg_sys::pstrdup(message.as_ptr());
                if let Some(detail) = detail {
                    pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(detail.as_ptr());
                }
                pg_sys::GUC_check_errhint_string = pg_sys::pstrdup(hint.as_ptr());
            }
            false
        }
    }
}

/// The assign hook of `snowid.mask_key_file`: installs the keys the check hook parsed.
///
/// # Safety
///
/// Called by PostgreSQL's GUC machinery with the `extra` the check hook made.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn assign_key_file(_newval: *const c_char, extra: *mut c_void) {
    // SAFETY: the check hook wrote a u64 there (or PostgreSQL passes null for no extra).
    let number = unsafe { (!extra.is_null()).then(|| extra.cast::<u64>().read_unaligned()) };
    let Some(loaded) = number.and_then(|n| CHECKED.with_borrow(|checked| checked.get(&n).cloned()))
    else {
        return;
    };
    // What was checked before this is no longer needed; what was checked after may still be
    // assigned.
    CHECKED.with_borrow_mut(|checked| checked.retain(|&n, _| Some(n) > number));
    INSTALLED.with_borrow_mut(|installed| {
        *installed = Some(Installed {
            file: loaded,
            database: None,
        });
    });
}

/// Runs `with` on this database's keys. Raises the errors of a server without preloading,
/// without a key file, or without keys for this database; `what` is the SQL function.
pub fn with_keys<R>(what: &str, with: impl FnOnce(&DatabaseKeys) -> R) -> R {
    let keys = INSTALLED.with_borrow_mut(|installed| {
        let Some(installed) = installed.as_mut() else {
            errors::mask_not_preloaded(what)
        };
        let Some(file) = installed.file.clone() else {
            errors::mask_key_file_not_set(what)
        };
        installed
            .database
            .get_or_insert_with(|| file.for_database(&database_name()).map(Rc::new))
            .clone()
    });
    match keys {
        Some(keys) => with(&keys),
        None => errors::no_mask_key_for_database(what, &database_name_for_messages()),
    }
}

/// This database's keys' fingerprints, as `snowid_mask_key_fingerprint()` shows them; `None`
/// where this server has no keys for this database. Two servers that agree give every ID of
/// this database the same public forms, and read the same ones.
pub fn fingerprint() -> Option<String> {
    let defined = INSTALLED.with_borrow(|i| i.as_ref().is_some_and(|i| i.file.is_some()));
    defined.then(|| with_keys("snowid_mask_key_fingerprint", |keys| keys.summary()))
}

/// This database's keys' fingerprints as [`fingerprint`] gives them, or `None` where this
/// process has no key file, or no keys for this database; never raises for want of keys. For the
/// Citus check, which compares them across nodes.
pub fn fingerprints_if_any() -> Option<String> {
    INSTALLED.with_borrow_mut(|installed| {
        let installed = installed.as_mut()?;
        let file = installed.file.clone()?;
        installed
            .database
            .get_or_insert_with(|| file.for_database(&database_name()).map(Rc::new))
            .as_ref()
            .map(|keys| keys.summary())
    })
}

/// This database's name as the key file and the derivation read it: UTF-8 (its bytes as they
/// are in an `SQL_ASCII` database, whose names have no declared encoding).
fn database_name() -> Vec<u8> {
    // SAFETY: called within a transaction; get_database_name returns a palloc'd,
    // NUL-terminated name (or null for a database dropped meanwhile).
    unsafe {
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        if name.is_null() {
            return Vec::new();
        }
        let bytes = CStr::from_ptr(name).to_bytes();
        if pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_SQL_ASCII as i32 {
            return bytes.to_vec();
        }
        let converted =
            pg_sys::pg_server_to_any(name, bytes.len() as i32, pg_sys::pg_enc::PG_UTF8 as i32);
        CStr::from_ptr(converted).to_bytes().to_vec()
    }
}

fn database_name_for_messages() -> String {
    String::from_utf8_lossy(&database_name()).into_owned()
}
