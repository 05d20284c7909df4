//! No statement that names a mask key reaches the server's log.
//!
//! 0.7.0 took its key from the setting `snowid.mask_key`; 0.8.0 reads keys from a file only, and
//! the setting is gone. A statement that still names it (`SET snowid.mask_key = '...'`,
//! `set_config`, `ALTER DATABASE`, `ALTER ROLE` or `ALTER SYSTEM ... SET`, from habit or an old
//! script) is refused, and PostgreSQL would log its text, key included: as the `STATEMENT` of
//! its error under the default `log_min_error_statement`, and before it runs under
//! `log_statement = 'all'` (or `ddl`, or `log_min_duration_statement`), with its parameters.
//!
//! A log hook, installed at preload (the postmaster and every process it starts have it),
//! looks at every message while a statement whose text names `mask_key` runs: it keeps that
//! statement out of the message's `STATEMENT` line (`hide_stmt`), and writes over the statement
//! wherever a message quotes it, and over a detail or context that lists the statement's
//! parameters. Every other message passes untouched. It allocates nothing and cannot fail; it
//! then calls the hook installed before it.

use pgrx::pg_sys;
use std::ffi::{c_char, CStr};

/// What the hook looks for in a statement: the old setting's name, as an identifier (not the
/// start of a longer one such as `mask_key_file`).
const NAME: &[u8] = b"mask_key";
/// What a quoted statement is replaced with, cut to its length where it is shorter.
const HIDDEN: &[u8] = b"(hidden: it names snowid.mask_key)";

static mut PREVIOUS_HOOK: pg_sys::emit_log_hook_type = None;

/// Installs the log hook. Call only from `_PG_init` during `shared_preload_libraries`
/// processing, so that the postmaster and every process it starts have it.
pub fn install() {
    // SAFETY: at preload, before any other code of this process reads the hook.
    unsafe {
        PREVIOUS_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(keep_keys_out_of_log);
    }
}

/// Whether a text names `mask_key` as an identifier, in any case.
pub fn names_mask_key(text: &[u8]) -> bool {
    let identifier = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    text.windows(NAME.len()).enumerate().any(|(at, window)| {
        window.eq_ignore_ascii_case(NAME)
            && !text.get(at + NAME.len()).is_some_and(|&b| identifier(b))
            && !(at > 0 && identifier(text[at - 1]))
    })
}

unsafe extern "C-unwind" fn keep_keys_out_of_log(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the message being reported; its strings are null or
    // NUL-terminated palloc'd copies of this report's own, which may be changed in place; the
    // statement is null or NUL-terminated.
    unsafe {
        if let (Some(data), Some(statement)) = (
            edata.as_mut(),
            pg_sys::debug_query_string
                .as_ref()
                .map(|s| CStr::from_ptr(s).to_bytes()),
        ) {
            if names_mask_key(statement) {
                data.hide_stmt = true;
                for field in [data.message, data.detail, data.detail_log, data.context] {
                    if let Some(field) = field.as_mut() {
                        hide_statement(field, statement);
                    }
                }
            }
        }
        if let Some(previous) = PREVIOUS_HOOK {
            previous(edata);
        }
    }
}

/// Writes over the statement where a field quotes it, from its start to the field's end, and
/// over the whole of a field that lists parameters (`$1 = '...'`).
///
/// # Safety
///
/// `field` is the first byte of a writable NUL-terminated string.
unsafe fn hide_statement(field: &mut c_char, statement: &[u8]) {
    // SAFETY: guaranteed by the caller; the slice stops before the NUL, which stays.
    let bytes = unsafe {
        let len = CStr::from_ptr(field).to_bytes().len();
        std::slice::from_raw_parts_mut(std::ptr::from_mut(field).cast::<u8>(), len)
    };
    let quoted = (!statement.is_empty())
        .then(|| bytes.windows(statement.len()).position(|w| w == statement))
        .flatten();
    let parameters = bytes
        .windows(2)
        .any(|w| w[0] == b'$' && w[1].is_ascii_digit());
    let from = match (quoted, parameters) {
        (Some(at), _) => at,
        (None, true) => 0,
        (None, false) => return,
    };
    let rest = &mut bytes[from..];
    let written = HIDDEN.len().min(rest.len());
    rest[..written].copy_from_slice(&HIDDEN[..written]);
    if let Some(end) = rest.get_mut(written) {
        // The string ends here now.
        *end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::names_mask_key;

    #[test]
    fn statements_naming_the_old_setting_are_recognised() {
        for named in [
            "SET snowid.mask_key = 'x'",
            "set SNOWID.MASK_KEY to 'x'",
            "SELECT set_config('snowid.mask_key', 'x', false)",
            "ALTER SYSTEM SET \"snowid\".\"mask_key\" = 'x'",
            "ALTER ROLE r SET snowid.mask_key='x'",
            "mask_key",
        ] {
            assert!(names_mask_key(named.as_bytes()), "{named}");
        }
        for other in [
            "ALTER SYSTEM SET snowid.mask_key_file = 'keys'",
            "SELECT my_mask_key FROM t",
            "SELECT snowid_mask(1)",
            "SELECT mask_key2",
        ] {
            assert!(!names_mask_key(other.as_bytes()), "{other}");
        }
    }
}
