//! The bytes a text key hashes to its shard: its UTF-8 form, whatever the database's encoding,
//! so that the same text gives the same shard in a UTF8, LATIN1 or EUC_JP database, and in any
//! client that hashes its own UTF-8 string.
//!
//! A text value arrives in the database's encoding. In a UTF8 database it is already UTF-8 and
//! is used as it is; in any other it is converted, as PostgreSQL converts for a UTF-8 client.
//! Bytes that the database's encoding does not allow (possible in an `SQL_ASCII` database, which
//! stores any bytes) raise PostgreSQL's own error, SQLSTATE 22021.

use pgrx::pg_sys;
use std::ffi::{c_char, CStr};

/// Runs `with` on the UTF-8 bytes of a `text` (or `varchar`) Datum.
///
/// # Safety
///
/// `datum` is a non-null `text` or `varchar` Datum, and the caller runs under a `#[pg_guard]`
/// (a conversion error is raised as a PostgreSQL ERROR).
pub unsafe fn with_utf8<R>(datum: pg_sys::Datum, with: impl FnOnce(&[u8]) -> R) -> R {
    // SAFETY: a varlena Datum, detoasted (and unpacked from a short header if need be) into
    // this memory context; its payload is `len` bytes at `data`.
    unsafe {
        let varlena = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
        let len = pgrx::varlena::varsize_any_exhdr(varlena);
        let data = pgrx::varlena::vardata_any(varlena).cast::<c_char>();
        // Returns its argument when no conversion is needed (after validating it when the
        // database is SQL_ASCII), or a palloc'd, NUL-terminated converted copy.
        let converted = pg_sys::pg_server_to_any(data, len as i32, pg_sys::pg_enc::PG_UTF8 as i32);
        if std::ptr::eq(converted, data) {
            with(std::slice::from_raw_parts(data.cast::<u8>(), len))
        } else {
            with(CStr::from_ptr(converted).to_bytes())
        }
    }
}
