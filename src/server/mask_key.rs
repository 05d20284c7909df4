//! The public IDs' mask as this process holds it, and the key kept out of the server's log.
//!
//! - The mask is derived from `snowid.mask_key` (the AES key schedule) once per key: each
//!   process keeps the mask with the key it was derived from, and compares the setting with that
//!   key on every call (at most 64 bytes), so a reload that changes the key takes effect at the
//!   next statement, as any setting's does. `snowid_next`'s path never comes here.
//! - PostgreSQL's postmaster logs every setting a reload changes, with its new value
//!   (`parameter "snowid.mask_key" changed to "..."`), and each backend does so at DEBUG2. A log
//!   hook, installed at preload, writes asterisks over the key in that one message; every other
//!   message passes untouched. A malformed key's error never quotes it (see
//!   [`super::settings`]), and the hook keeps the statement that was refused (an `ALTER SYSTEM`
//!   holding the malformed key) out of the log too.

use super::settings;
use crate::errors;
use pgrx::pg_sys;
use snowid_core::mask::Mask;
use std::cell::RefCell;
use std::ffi::CStr;

thread_local! {
    /// The mask of the key this process last used, with that key.
    static CURRENT: RefCell<Option<(Vec<u8>, Mask)>> = const { RefCell::new(None) };
}

/// Runs `with` on the mask of the key in force, derived once per key. Raises the errors of a
/// server without preloading or without a key; `what` is the SQL function, for those errors.
pub fn with_mask<R>(what: &str, with: impl FnOnce(&Mask) -> R) -> R {
    let Some(key) = settings::mask_key() else {
        if !settings::defined() {
            errors::mask_not_preloaded(what);
        }
        errors::mask_key_not_set(what);
    };
    CURRENT.with_borrow_mut(|current| {
        let key = key.to_bytes();
        if current.as_ref().map(|(k, _)| k.as_slice()) != Some(key) {
            // The setting's check hook let only well-formed keys through.
            let text = std::str::from_utf8(key).unwrap_or_default();
            let mask = Mask::from_hex(text).unwrap_or_else(|_| errors::mask_key_not_set(what));
            *current = Some((key.to_vec(), mask));
        }
        let (_, mask) = current.as_ref().expect("the mask was just derived");
        with(mask)
    })
}

/// The message whose value is written over: PostgreSQL's untranslated format, which
/// `ErrorData::message_id` holds whatever the language of the message.
const CHANGED_TO: &CStr = c"parameter \"%s\" changed to \"%s\"";

static mut PREVIOUS_HOOK: pg_sys::emit_log_hook_type = None;

/// Installs the log hook. Call only from `_PG_init` during `shared_preload_libraries`
/// processing, so that the postmaster, which logs the reload, has it.
pub fn install_log_hook() {
    // SAFETY: at preload, before any other code of this process reads the hook.
    unsafe {
        PREVIOUS_HOOK = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(keep_key_out_of_log);
    }
}

/// Writes asterisks over the key in "parameter changed" messages, and keeps the statement of a
/// refused key out of the log; then calls the hook installed before this one. It allocates
/// nothing and cannot fail: it runs while PostgreSQL reports a message.
unsafe extern "C-unwind" fn keep_key_out_of_log(edata: *mut pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the message being reported; its strings are null or
    // NUL-terminated, and its message is this report's own palloc'd copy, which may be changed.
    unsafe {
        if let Some(data) = edata.as_mut() {
            if !data.message_id.is_null() && CStr::from_ptr(data.message_id) == CHANGED_TO {
                if let (Some(message), Some(key)) = (data.message.as_mut(), settings::mask_key()) {
                    blank_out(message, key.to_bytes());
                }
            }
            if !data.message.is_null()
                && CStr::from_ptr(data.message).to_bytes() == errors::INVALID_MASK_KEY.as_bytes()
            {
                data.hide_stmt = true;
            }
        }
        if let Some(previous) = PREVIOUS_HOOK {
            previous(edata);
        }
    }
}

/// Writes asterisks over every occurrence of `key` in a NUL-terminated message, in place.
///
/// # Safety
///
/// `message` is the first byte of a writable NUL-terminated string.
unsafe fn blank_out(message: &mut std::ffi::c_char, key: &[u8]) {
    // SAFETY: guaranteed by the caller; the slice stops before the NUL.
    let bytes = unsafe {
        let len = CStr::from_ptr(message).to_bytes().len();
        std::slice::from_raw_parts_mut(std::ptr::from_mut(message).cast::<u8>(), len)
    };
    if key.is_empty() {
        return;
    }
    let mut at = 0;
    while at + key.len() <= bytes.len() {
        if bytes[at..at + key.len()].eq_ignore_ascii_case(key) {
            bytes[at..at + key.len()].fill(b'*');
            at += key.len();
        } else {
            at += 1;
        }
    }
}
