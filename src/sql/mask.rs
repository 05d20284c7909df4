//! Public IDs: `snowid_mask`, `snowid_unmask`, their text forms, domains, and the keys'
//! fingerprints.
//!
//! A keyed bijection of the non-negative `bigint`s (FF1 of NIST SP 800-38G, see
//! `snowid_core::mask`) under this database's keys from the key file (see
//! `server::mask_key`). The key in force changes at a reload, so the functions are STABLE, never
//! IMMUTABLE: a masked value must not be stored in an index expression or a generated column,
//! where a new key would leave it stale. They are PARALLEL SAFE: a parallel worker holds the
//! keys the server had when it started (see `server::mask_key`).
//!
//! The functions that take text are written out by hand, like `snowid_shard_for(text)`, because
//! pgrx's `&str` argument insists on UTF-8 and would fail with XX000 on a non-ASCII character in
//! a database of another encoding: here every text is read as UTF-8 (converted from the
//! database's encoding; in an `SQL_ASCII` database, whose text has no declared encoding, a byte
//! outside ASCII is a byte), so a malformed masked text is refused with 22P02 in every encoding,
//! and a domain is the same tweak on every server.

use crate::errors;
use crate::server::{citus, mask_key};
use pgrx::prelude::*;
use snowid_core::mask::keys::DatabaseKeys;
use snowid_core::mask::text::{self, Unit, Version};
use snowid_core::mask::Negative;
use std::ffi::CStr;

/// An ID's masked form: a non-negative `bigint` that says nothing of the ID without the key.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_mask(id: i64) -> i64 {
    mask("snowid_mask", id, b"")
}

/// The ID a masked form stands for, under the version of the key that masks.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_unmask(masked: i64) -> i64 {
    unmask("snowid_unmask", masked, b"", None)
}

/// An ID's masked form as 13 symbols of Crockford's base32 (one more, the key's version, after
/// version 1), for URLs.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_mask_text(id: i64) -> String {
    mask_text("snowid_mask_text", id, b"", "")
}

/// This database's key versions: each one's number, whether it masks, its fingerprint, and
/// whether it is the default's derived for this database.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_mask_keys() -> TableIterator<
    'static,
    (
        name!(version, i32),
        name!(masks, bool),
        name!(fingerprint, String),
        name!(derived, bool),
    ),
> {
    let rows: Vec<_> = mask_key::with_keys("snowid_mask_keys", |keys| {
        let masking = keys.masking().version;
        keys.versions
            .iter()
            .map(|v| {
                (
                    i32::from(v.version.number()),
                    v.version == masking,
                    v.fingerprint.clone(),
                    keys.derived,
                )
            })
            .collect()
    });
    TableIterator::new(rows)
}

/// This database's keys' fingerprints in one line, such as `1:0f3a9c2e5b7d1e40 2*:9e1d2c3b4a5f6071`
/// (the version that masks marked): equal on two servers exactly when they give this database's
/// IDs the same public forms.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_mask_key_fingerprint() -> String {
    mask_key::with_keys("snowid_mask_key_fingerprint", DatabaseKeys::summary)
}

fn mask(what: &str, id: i64, domain: &[u8]) -> i64 {
    with_keys(what, |keys| {
        let version = keys.masking();
        version.mask.mask_in(&version.mask.domain(domain), id)
    })
    .unwrap_or_else(|Negative(v)| errors::negative_mask_input(what, v))
}

fn mask_text(what: &str, id: i64, domain: &[u8], prefix: &str) -> String {
    with_keys(what, |keys| {
        let version = keys.masking();
        version
            .mask
            .mask_in(&version.mask.domain(domain), id)
            .and_then(|masked| text::format(masked, version.version, prefix))
    })
    .unwrap_or_else(|Negative(v)| errors::negative_mask_input(what, v))
}

/// Unmasks under a version (the one that masks if `None`).
fn unmask(what: &str, masked: i64, domain: &[u8], version: Option<i32>) -> i64 {
    with_keys(what, |keys| {
        let key = match version {
            None => keys.masking(),
            Some(n) => Version::new(i64::from(n))
                .and_then(|v| keys.version(v))
                .unwrap_or_else(|| errors::no_such_mask_key_version(what, n, &versions(keys))),
        };
        key.mask.unmask_in(&key.mask.domain(domain), masked)
    })
    .unwrap_or_else(|Negative(v)| errors::negative_mask_input(what, v))
}

/// The ID a text form stands for, under the key version it names.
fn unmask_text(what: &str, text: &Text, domain: &[u8], prefix: &str) -> i64 {
    let (version, masked) = text
        .parse(prefix)
        .unwrap_or_else(|e| errors::invalid_masked_text(&text.lossy(), &e.to_string()));
    with_keys(what, |keys| {
        let Some(key) = keys.version(version) else {
            errors::invalid_masked_text(
                &text.lossy(),
                &format!(
                    "it names key version {version}, which this database's keys lack (they are {})",
                    versions(keys)
                ),
            )
        };
        key.mask.unmask_in(&key.mask.domain(domain), masked)
    })
    .unwrap_or_else(|Negative(v)| errors::negative_mask_input(what, v))
}

/// A database's key versions as a list, such as `1, 2 and 3`.
fn versions(keys: &DatabaseKeys) -> String {
    let numbers: Vec<String> = keys
        .versions
        .iter()
        .map(|v| v.version.to_string())
        .collect();
    match numbers.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => numbers.join(""),
    }
}

/// A text argument as the mask reads it: UTF-8 (converted from the database's encoding), or, in
/// an `SQL_ASCII` database holding bytes outside ASCII, those bytes as they are.
struct Text {
    bytes: Vec<u8>,
    raw: bool,
}

impl Text {
    /// The text of a non-null `text` Datum.
    ///
    /// # Safety
    ///
    /// `datum` is a non-null `text` Datum; the caller runs under a `#[pg_guard]`.
    unsafe fn of(datum: pg_sys::Datum) -> Text {
        // SAFETY: a varlena Datum, detoasted into this memory context; its payload is `len`
        // bytes at `data`.
        unsafe {
            let varlena = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            let len = pgrx::varlena::varsize_any_exhdr(varlena);
            let data = pgrx::varlena::vardata_any(varlena).cast::<std::ffi::c_char>();
            let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
            let encoding = pg_sys::GetDatabaseEncoding();
            if bytes.is_ascii() || encoding == pg_sys::pg_enc::PG_UTF8 as i32 {
                return Text {
                    bytes: bytes.to_vec(),
                    raw: false,
                };
            }
            if encoding == pg_sys::pg_enc::PG_SQL_ASCII as i32 {
                return Text {
                    bytes: bytes.to_vec(),
                    raw: true,
                };
            }
            // Valid in the database's encoding, so it converts.
            let converted =
                pg_sys::pg_server_to_any(data, len as i32, pg_sys::pg_enc::PG_UTF8 as i32);
            Text {
                bytes: CStr::from_ptr(converted).to_bytes().to_vec(),
                raw: false,
            }
        }
    }

    /// The text as a masked ID's text form with this prefix.
    fn parse(&self, prefix: &str) -> Result<(Version, i64), text::TextError> {
        if self.raw {
            let units = self.bytes.iter().map(|&b| {
                if b.is_ascii() {
                    Unit::Char(b as char)
                } else {
                    Unit::Byte(b)
                }
            });
            text::parse(units, prefix)
        } else {
            text::parse(
                String::from_utf8_lossy(&self.bytes).chars().map(Unit::Char),
                prefix,
            )
        }
    }

    /// The text for an error message, which quotes only short printable ASCII.
    fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// The text as a prefix: checked, ASCII.
    fn prefix(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes).into_owned();
        let checked = if self.raw {
            // A byte outside ASCII is never part of a prefix.
            let position = self.bytes.iter().position(|b| !b.is_ascii()).unwrap_or(0) + 1;
            Err(text::PrefixError::Character(position))
        } else {
            text::check_prefix(&text)
        };
        checked.unwrap_or_else(|e| errors::invalid_mask_prefix(&e.to_string()));
        text
    }
}

/// Argument `n` of a call, or `None` when it is null.
///
/// # Safety
///
/// `fcinfo` is the call's, with at least `n + 1` arguments.
unsafe fn argument(fcinfo: pg_sys::FunctionCallInfo, n: usize) -> Option<pg_sys::Datum> {
    // SAFETY: guaranteed by the caller.
    let arg = unsafe { (*fcinfo).args.as_slice(n + 1)[n] };
    (!arg.isnull).then_some(arg.value)
}

/// Returns SQL's null from a hand-written function.
///
/// # Safety
///
/// `fcinfo` is the call's.
unsafe fn null(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: guaranteed by the caller.
    unsafe { (*fcinfo).isnull = true };
    pg_sys::Datum::from(0)
}

extension_sql!(
    r#"
CREATE FUNCTION snowid_unmask_text(masked text) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_wrapper';
CREATE FUNCTION snowid_mask(id bigint, domain text) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_in_domain_wrapper';
CREATE FUNCTION snowid_unmask(masked bigint, domain text, version integer DEFAULT NULL) RETURNS bigint
STABLE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_in_domain_wrapper';
CREATE FUNCTION snowid_mask_text(id bigint, domain text, prefix text DEFAULT '') RETURNS text
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_mask_text_in_domain_wrapper';
CREATE FUNCTION snowid_unmask_text(masked text, domain text, prefix text DEFAULT '') RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_in_domain_wrapper';
"#,
    name = "mask_text_functions"
);

v1_function_info!(
    pg_finfo_snowid_unmask_text_wrapper,
    pg_finfo_snowid_mask_in_domain_wrapper,
    pg_finfo_snowid_unmask_in_domain_wrapper,
    pg_finfo_snowid_mask_text_in_domain_wrapper,
    pg_finfo_snowid_unmask_text_in_domain_wrapper
);

/// `snowid_unmask_text(masked text)`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with one non-null `text` argument.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_unmask_text_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function is STRICT with one text argument, and this runs guarded.
    let text = unsafe { Text::of((*fcinfo).args.as_slice(1)[0].value) };
    pg_sys::Datum::from(unmask_text("snowid_unmask_text", &text, b"", ""))
}

/// `snowid_mask(id bigint, domain text)`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with two non-null arguments of those types.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_mask_in_domain_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function is STRICT with these arguments, and this runs guarded.
    let (id, domain) = unsafe {
        let args = (*fcinfo).args.as_slice(2);
        (args[0].value.value() as i64, Text::of(args[1].value))
    };
    pg_sys::Datum::from(mask("snowid_mask", id, &domain.bytes))
}

/// `snowid_unmask(masked bigint, domain text, version integer DEFAULT NULL)`: null when the
/// masked ID or the domain is; the version that masks when the version is null.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with three arguments of those types.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_unmask_in_domain_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: three arguments of these types, and this runs guarded.
    unsafe {
        let (Some(masked), Some(domain)) = (argument(fcinfo, 0), argument(fcinfo, 1)) else {
            return null(fcinfo);
        };
        let version = argument(fcinfo, 2).map(|v| v.value() as i32);
        let domain = Text::of(domain);
        pg_sys::Datum::from(unmask(
            "snowid_unmask",
            masked.value() as i64,
            &domain.bytes,
            version,
        ))
    }
}

/// `snowid_mask_text(id bigint, domain text, prefix text DEFAULT '')`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with three non-null arguments of those types.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_mask_text_in_domain_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function is STRICT with these arguments, and this runs guarded.
    let (id, domain, prefix) = unsafe {
        let args = (*fcinfo).args.as_slice(3);
        (
            args[0].value.value() as i64,
            Text::of(args[1].value),
            Text::of(args[2].value),
        )
    };
    let prefix = prefix.prefix();
    let text = mask_text("snowid_mask_text", id, &domain.bytes, &prefix);
    text.into_datum().unwrap_or_else(|| pg_sys::Datum::from(0))
}

/// `snowid_unmask_text(masked text, domain text, prefix text DEFAULT '')`.
///
/// # Safety
///
/// Called by PostgreSQL's function manager with three non-null `text` arguments.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snowid_unmask_text_in_domain_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: the function is STRICT with three text arguments, and this runs guarded.
    let (text, domain, prefix) = unsafe {
        let args = (*fcinfo).args.as_slice(3);
        (
            Text::of(args[0].value),
            Text::of(args[1].value),
            Text::of(args[2].value),
        )
    };
    let prefix = prefix.prefix();
    pg_sys::Datum::from(unmask_text(
        "snowid_unmask_text",
        &text,
        &domain.bytes,
        &prefix,
    ))
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_mask(bigint) IS
    'An ID''s public form: a non-negative bigint that says nothing of the ID''s time, shard or order without the key (FF1 of NIST SP 800-38G under this database''s key from snowid.mask_key_file). STABLE: the key can change.';
COMMENT ON FUNCTION snowid_unmask(bigint) IS
    'The ID a public form from snowid_mask stands for, under the key version that masks: for lookups, WHERE id = snowid_unmask($1).';
COMMENT ON FUNCTION snowid_mask_text(bigint) IS
    'An ID''s public form for URLs: snowid_mask as 13 symbols of Crockford''s base32, after a symbol of the key''s version from version 2.';
COMMENT ON FUNCTION snowid_unmask_text(text) IS
    'The ID a text from snowid_mask_text stands for, under the key version it names (any case; I, L and O read as 1, 1 and 0).';
COMMENT ON FUNCTION snowid_mask(bigint, text) IS
    'An ID''s public form in a domain (a table or type name, FF1''s tweak): two domains give one ID unrelated forms.';
COMMENT ON FUNCTION snowid_unmask(bigint, text, integer) IS
    'The ID a public form from snowid_mask(id, domain) stands for, under a key version (null: the one that masks).';
COMMENT ON FUNCTION snowid_mask_text(bigint, text, text) IS
    'An ID''s public form for URLs in a domain, after a prefix and _ where one is given (ord_...).';
COMMENT ON FUNCTION snowid_unmask_text(text, text, text) IS
    'The ID a text from snowid_mask_text(id, domain, prefix) stands for; a text without the prefix is refused.';
COMMENT ON FUNCTION snowid_mask_keys() IS
    'This database''s mask key versions: which masks, each one''s fingerprint (safe to show), and whether they are the default''s derived for this database.';
COMMENT ON FUNCTION snowid_mask_key_fingerprint() IS
    'This database''s mask keys'' fingerprints in one line: equal on every node, standby and Patroni member that gives its IDs the same public forms.';
"#,
    name = "mask_comments",
    requires = [
        snowid_mask,
        snowid_unmask,
        snowid_mask_text,
        snowid_mask_keys,
        snowid_mask_key_fingerprint,
        "mask_text_functions"
    ]
);

/// Runs `with` on this database's keys (see [`mask_key::with_keys`]), unless this is a Citus
/// node whose last check found another node with other keys for this database.
fn with_keys<R>(what: &str, with: impl FnOnce(&DatabaseKeys) -> R) -> R {
    if let Some((this_node, differ)) = citus::mask_keys_differ() {
        errors::citus_mask_keys_differ(what, &this_node, &differ)
    }
    mask_key::with_keys(what, with)
}
