//! Public IDs: `snowid_mask`, `snowid_unmask` and their text forms.
//!
//! A keyed bijection of the non-negative `bigint`s (FF1 of NIST SP 800-38G, see
//! `snowid_core::mask`), under the key in `snowid.mask_key`. Each result depends on that setting,
//! which a reload can change, so the functions are STABLE, never IMMUTABLE: a masked value must
//! not be stored in an index expression or a generated column, where a new key would leave it
//! stale. They are PARALLEL SAFE: a parallel worker receives the leader's settings.

use super::text_key;
use crate::errors;
use crate::server::mask_key::with_mask;
use pgrx::prelude::*;
use snowid_core::mask::{self, Negative};

/// An ID's masked form: a non-negative `bigint` that says nothing of the ID without the key.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_mask(id: i64) -> i64 {
    with_mask("snowid_mask", |m| m.mask(id))
        .unwrap_or_else(|Negative(v)| errors::negative_mask_input("snowid_mask", v))
}

/// The ID a masked form stands for: `snowid_unmask(snowid_mask(id)) = id` for every ID.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_unmask(masked: i64) -> i64 {
    with_mask("snowid_unmask", |m| m.unmask(masked))
        .unwrap_or_else(|Negative(v)| errors::negative_mask_input("snowid_unmask", v))
}

/// An ID's masked form as 13 symbols of Crockford's base32, for URLs.
#[pg_extern(stable, strict, parallel_safe)]
fn snowid_mask_text(id: i64) -> String {
    with_mask("snowid_mask_text", |m| m.mask(id))
        .and_then(mask::to_text)
        .unwrap_or_else(|Negative(v)| errors::negative_mask_input("snowid_mask_text", v))
}

// The ID a masked text form stands for. Written out by hand, like snowid_shard_for(text), because
// pgrx's `&str` argument insists on UTF-8 and would fail with XX000 on a non-ASCII character in
// a database of another encoding; here every text is read as UTF-8 and refused with 22P02.
extension_sql!(
    r#"
CREATE FUNCTION snowid_unmask_text(masked text) RETURNS bigint
STABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'snowid_unmask_text_wrapper';
"#,
    name = "snowid_unmask_text"
);

v1_function_info!(pg_finfo_snowid_unmask_text_wrapper);

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
    let masked = unsafe {
        let text = (*fcinfo).args.as_slice(1)[0].value;
        text_key::with_utf8(text, |bytes| {
            let text = String::from_utf8_lossy(bytes);
            mask::from_text(&text)
                .unwrap_or_else(|e| errors::invalid_masked_text(&text, &e.to_string()))
        })
    };
    let id = with_mask("snowid_unmask_text", |m| m.unmask(masked))
        .unwrap_or_else(|Negative(v)| errors::negative_mask_input("snowid_unmask_text", v));
    pg_sys::Datum::from(id)
}

extension_sql!(
    r#"
COMMENT ON FUNCTION snowid_mask(bigint) IS
    'An ID''s public form: a non-negative bigint that says nothing of the ID''s time, shard or order without the key in snowid.mask_key (FF1 of NIST SP 800-38G). STABLE: the key can change.';
COMMENT ON FUNCTION snowid_unmask(bigint) IS
    'The ID a public form from snowid_mask stands for, under the key in snowid.mask_key: for lookups, WHERE id = snowid_unmask($1).';
COMMENT ON FUNCTION snowid_mask_text(bigint) IS
    'An ID''s public form for URLs: snowid_mask as 13 symbols of Crockford''s base32.';
COMMENT ON FUNCTION snowid_unmask_text(text) IS
    'The ID a text from snowid_mask_text stands for (any case; I, L and O read as 1, 1 and 0).';
"#,
    name = "mask_comments",
    requires = [
        snowid_mask,
        snowid_unmask,
        snowid_mask_text,
        "snowid_unmask_text"
    ]
);
