//! The text form of a masked ID: Crockford's base32, with the key's version and a prefix.
//!
//! `[prefix_][version]SSSSSSSSSSSSS`:
//!
//! - 13 symbols of Crockford's base32, most significant first: digits and capital letters
//!   without I, L, O and U, so that it reads aloud without ambiguity; 63 bits, so the first is
//!   0 to 7;
//! - before them, one symbol for the version of the key that masked it, from 2 (`2`) to 31
//!   (`Z`), and none for version 1: version 1's form is 0.7.0's, 13 symbols, unchanged;
//! - before that, optionally, a prefix of ASCII letters, digits and underscores, and `_`.
//!
//! Reading accepts any case, and I, L and O for the 1 and 0 they are mistaken for, everywhere
//! (in the version symbol too; the prefix is compared without regard to case). A version
//! symbol of `1` is read as version 1 as well.

use super::Negative;
use std::fmt;

/// The length of a version-1 text form without a prefix: 13 symbols of 5 bits hold 63 bits.
pub const TEXT_LEN: usize = 13;
/// The longest prefix.
pub const PREFIX_MAX: usize = 32;

/// Crockford's base32 alphabet, in ASCII order, so that the text form sorts as the number does.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A key's version, from 1 to 31: the text form names it in one symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(u8);

impl Version {
    /// Version 1: the key of 0.7.0's forms.
    pub const FIRST: Version = Version(1);
    /// The highest version.
    pub const MAX: u8 = 31;

    /// The version `n`, if it is from 1 to 31.
    pub fn new(n: i64) -> Option<Version> {
        u8::try_from(n)
            .ok()
            .filter(|n| (1..=Version::MAX).contains(n))
            .map(Version)
    }

    /// The version's number.
    pub fn number(self) -> u8 {
        self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The version-1 text form of a masked ID without a prefix: 13 symbols (0.7.0's form).
pub fn to_text(masked: i64) -> Result<String, Negative> {
    format(masked, Version::FIRST, "")
}

/// The text form of a masked ID under a key's version, with a prefix (none if empty), which the
/// caller checked with [`check_prefix`].
pub fn format(masked: i64, version: Version, prefix: &str) -> Result<String, Negative> {
    let value = u64::try_from(masked).map_err(|_| Negative(masked))?;
    let mut text = String::with_capacity(prefix.len() + 2 + TEXT_LEN);
    if !prefix.is_empty() {
        text.push_str(prefix);
        text.push('_');
    }
    if version != Version::FIRST {
        text.push(ALPHABET[usize::from(version.0)] as char);
    }
    text.extend(
        (0..TEXT_LEN)
            .rev()
            .map(|i| ALPHABET[((value >> (5 * i)) & 31) as usize] as char),
    );
    Ok(text)
}

/// Why a prefix cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrefixError {
    /// Longer than [`PREFIX_MAX`] characters; the number it has.
    Length(usize),
    /// The character at this position (from 1) is not an ASCII letter, digit or underscore.
    Character(usize),
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrefixError::Length(n) => {
                write!(f, "it has {n} characters, more than {PREFIX_MAX}")
            }
            PrefixError::Character(position) => write!(
                f,
                "character {position} is not an ASCII letter, digit or underscore"
            ),
        }
    }
}

/// Whether a prefix can be used: at most 32 ASCII letters, digits and underscores.
pub fn check_prefix(prefix: &str) -> Result<(), PrefixError> {
    if let Some(position) = prefix
        .chars()
        .position(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(PrefixError::Character(position + 1));
    }
    if prefix.len() > PREFIX_MAX {
        return Err(PrefixError::Length(prefix.len()));
    }
    Ok(())
}

/// One unit of a text being read: a character, or (in an `SQL_ASCII` database, whose text has
/// no declared encoding) a byte that is not ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Char(char),
    Byte(u8),
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Unit::Char(c) if c.is_ascii_graphic() => write!(f, "'{c}'"),
            // A character outside ASCII as its code point, which reads the same in any encoding.
            Unit::Char(c) => write!(f, "U+{:04X}", u32::from(c)),
            Unit::Byte(b) => write!(f, "byte 0x{b:02X}"),
        }
    }
}

/// Why a text is not the text form of a masked ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextError {
    /// Not 13 or 14 characters after the prefix; the number it has.
    Length(usize),
    /// This unit, at this position (counting from 1, the prefix included), is not a symbol of
    /// the alphabet.
    Symbol(usize, Unit),
    /// 13 symbols, but above 2^63 - 1: the first is above 7.
    OutOfRange,
    /// The version symbol says 0, which no key has.
    VersionZero,
    /// The text does not begin with the expected prefix and `_`.
    Prefix(String),
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextError::Length(n) => write!(
                f,
                "it has {n} characters where 13 are expected (14 with a key version)"
            ),
            TextError::Symbol(position, unit) => write!(
                f,
                "character {position}, {unit}, is not a symbol of Crockford's base32 (0-9 and A-Z without U)"
            ),
            TextError::OutOfRange => {
                write!(f, "its first symbol is above 7, so it is beyond every masked ID")
            }
            TextError::VersionZero => write!(f, "its version symbol is 0, and versions start at 1"),
            TextError::Prefix(prefix) => write!(f, "it does not begin with \"{prefix}_\""),
        }
    }
}

/// The masked ID a 13-symbol, version-1 text form without a prefix stands for (0.7.0's reading).
pub fn from_text(text: &str) -> Result<i64, TextError> {
    let count = text.chars().count();
    if count != TEXT_LEN {
        return Err(TextError::Length(count));
    }
    parse(text.chars().map(Unit::Char), "").map(|(_, masked)| masked)
}

/// The key version and the masked ID a text form stands for, given the prefix expected (none if
/// empty). Case does not matter, and I, L and O read as 1, 1 and 0.
pub fn parse(
    text: impl Iterator<Item = Unit> + Clone,
    prefix: &str,
) -> Result<(Version, i64), TextError> {
    let mut units = text.enumerate();
    if !prefix.is_empty() {
        let expected = prefix.bytes().chain(Some(b'_'));
        for want in expected {
            match units.next() {
                Some((_, Unit::Char(c)))
                    if c.is_ascii() && (c as u8).eq_ignore_ascii_case(&want) => {}
                _ => return Err(TextError::Prefix(prefix.to_string())),
            }
        }
    }
    let rest: Vec<(usize, Unit)> = units.collect();
    let (version, symbols) = match rest.len() {
        TEXT_LEN => (Version::FIRST, &rest[..]),
        n if n == TEXT_LEN + 1 => {
            let (position, unit) = rest[0];
            let symbol = symbol_value(unit).ok_or(TextError::Symbol(position + 1, unit))?;
            (
                Version::new(i64::from(symbol)).ok_or(TextError::VersionZero)?,
                &rest[1..],
            )
        }
        n => return Err(TextError::Length(n)),
    };
    let mut value = 0u64;
    for (i, &(position, unit)) in symbols.iter().enumerate() {
        let symbol = symbol_value(unit).ok_or(TextError::Symbol(position + 1, unit))?;
        value = (value << 5) | u64::from(symbol);
        if i == 0 && symbol > 7 {
            return Err(TextError::OutOfRange);
        }
    }
    Ok((version, value as i64))
}

fn symbol_value(unit: Unit) -> Option<u8> {
    let Unit::Char(c) = unit else { return None };
    let c = match c.to_ascii_uppercase() {
        'I' | 'L' => '1',
        'O' => '0',
        c => c,
    };
    ALPHABET
        .iter()
        .position(|&a| a as char == c)
        .map(|position| position as u8)
}
