//! Public IDs: a keyed, reversible mask of the non-negative `bigint`s, its text form, and the
//! keys it is used under.
//!
//! The mask is FF1, the format-preserving encryption of NIST SP 800-38G, over AES from the
//! `aes` crate, with these parameters, so that any FF1 implementation computes the same values:
//!
//! - the key: 16, 24 or 32 bytes (AES-128, AES-192 or AES-256);
//! - radix 2, over numeral strings of 63 numerals: an ID's 63 low bits, most significant first
//!   (its sign bit is always 0, and so is the result's);
//! - the tweak: the domain's UTF-8 bytes, empty where no domain is given (0.7.0's only form).
//!
//! FF1 is a keyed permutation of its domain, so under each key and tweak the mask is a
//! bijection of 0..=2^63-1 onto itself: every masked ID is a non-negative `bigint`, and
//! unmasking gives back the ID. [`ff1`] computes it specialised to those parameters; the `fpe`
//! crate's general FF1 is the reference its tests compare it with.
//!
//! - [`text`]: the text form (Crockford's base32, with the key's version and a prefix);
//! - [`keys`]: the key file, each database's keys (its own, or derived from the default), and
//!   the keys' fingerprints.

pub mod ff1;
pub mod keys;
pub mod text;

use ff1::{Cipher, Domain};
use std::fmt;

/// The number of bits masked: every bit of a non-negative `bigint`.
pub const BITS: u32 = ff1::N;
/// The largest value the mask takes and gives: `bigint`'s maximum, 2^63 - 1.
pub const MAX: i64 = i64::MAX;

/// A key's hexadecimal lengths, with the AES variant each selects.
pub const KEY_HEX_LENGTHS: [usize; 3] = [32, 48, 64];

/// The mask under one key. Deriving it (the AES key schedule and the empty tweak's state) is
/// the costly part: build it once per key, and call [`Mask::mask`] and [`Mask::unmask`] as
/// often as needed. A domain's state ([`Mask::domain`]) costs one AES block per 16 bytes of
/// its name.
pub struct Mask {
    cipher: Cipher,
    no_domain: Domain,
}

/// Why a key is refused. Neither form repeats the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The key does not have 32, 48 or 64 characters; the number it has.
    Length(usize),
    /// The character at this position (counting from 1) is not a hexadecimal digit.
    NotHex(usize),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Length(n) => write!(
                f,
                "the key has {n} characters; it must have 32, 48 or 64 hexadecimal digits \
                 (a 128-, 192- or 256-bit AES key)"
            ),
            KeyError::NotHex(position) => write!(
                f,
                "character {position} of the key is not a hexadecimal digit (0-9, a-f)"
            ),
        }
    }
}

/// A negative value given to the mask: no ID is negative, and the mask covers none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negative(pub i64);

impl Mask {
    /// The mask under a key of 32, 48 or 64 hexadecimal digits (either case).
    pub fn from_hex(key: &str) -> Result<Mask, KeyError> {
        Ok(Mask::from_bytes(parse_hex(key)?.bytes()).expect("16, 24 or 32 bytes"))
    }

    /// The mask under a key of 16, 24 or 32 bytes; `None` for any other length.
    pub fn from_bytes(key: &[u8]) -> Option<Mask> {
        let cipher = Cipher::new(key)?;
        let no_domain = cipher.domain(&[]);
        Some(Mask { cipher, no_domain })
    }

    /// The state of a domain (FF1's tweak) under this key. The empty domain is the mask's own
    /// (and 0.7.0's).
    pub fn domain(&self, name: &[u8]) -> Domain {
        if name.is_empty() {
            self.no_domain
        } else {
            self.cipher.domain(name)
        }
    }

    /// The masked form of `id`, from 0 to 2^63 - 1 like `id`, with no domain.
    #[inline]
    pub fn mask(&self, id: i64) -> Result<i64, Negative> {
        self.mask_in(&self.no_domain, id)
    }

    /// The ID whose masked form is `masked`: `unmask(mask(id)) == id` for every ID.
    #[inline]
    pub fn unmask(&self, masked: i64) -> Result<i64, Negative> {
        self.unmask_in(&self.no_domain, masked)
    }

    /// The masked form of `id` in a domain.
    #[inline]
    pub fn mask_in(&self, domain: &Domain, id: i64) -> Result<i64, Negative> {
        let x = u64::try_from(id).map_err(|_| Negative(id))?;
        Ok(self.cipher.encrypt_63(domain, x) as i64)
    }

    /// The ID whose masked form in a domain is `masked`.
    #[inline]
    pub fn unmask_in(&self, domain: &Domain, masked: i64) -> Result<i64, Negative> {
        let y = u64::try_from(masked).map_err(|_| Negative(masked))?;
        Ok(self.cipher.decrypt_63(domain, y) as i64)
    }
}

/// Whether a key is well formed (32, 48 or 64 hexadecimal digits), without deriving the mask.
pub fn check_key(key: &str) -> Result<(), KeyError> {
    parse_hex(key).map(drop)
}

/// The bytes of a key written in hexadecimal, checked for its length first.
pub fn parse_hex(key: &str) -> Result<keys::Secret, KeyError> {
    let length = key.chars().count();
    if !KEY_HEX_LENGTHS.contains(&length) {
        return Err(KeyError::Length(length));
    }
    if let Some(position) = key.chars().position(|c| !c.is_ascii_hexdigit()) {
        return Err(KeyError::NotHex(position + 1));
    }
    // Every character is an ASCII hexadecimal digit now.
    let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    Ok(keys::Secret::new(
        key.as_bytes()
            .chunks(2)
            .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
            .collect(),
    ))
}

// The 0.7.0 names of the text form, which keep meaning version 1 with no prefix.
pub use text::{from_text, to_text, TextError, TEXT_LEN};

#[cfg(test)]
mod tests;
