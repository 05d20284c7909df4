//! Public IDs: a keyed, reversible mask of the non-negative `bigint`s, and its text form.
//!
//! The mask is FF1, the format-preserving encryption of NIST SP 800-38G, from the `fpe` crate
//! over AES from the `aes` crate, with these parameters, so that any FF1 implementation computes
//! the same values:
//!
//! - the key: 16, 24 or 32 bytes (AES-128, AES-192 or AES-256), given as 32, 48 or 64
//!   hexadecimal digits;
//! - radix 2, over numeral strings of 63 numerals: an ID's 63 low bits, most significant first
//!   (its sign bit is always 0, and so is the result's);
//! - the empty tweak.
//!
//! FF1 is a keyed permutation of its domain, so the mask is a bijection of 0..=2^63-1 onto
//! itself: every masked ID is a non-negative `bigint`, and unmasking gives back the ID.
//!
//! The crate's own numeral strings carry a `Vec` and big integers. [`Bits`] is a numeral string
//! of radix 2 held in one `u64`: the FF1 rounds, the PRF and the cipher stay the crate's, and
//! only the arithmetic on at most 32 bits (NUM, STR, and the sum or difference modulo 2^m)
//! is done here, with no allocation. Its tests check it against the crate's general numeral
//! strings and against a published radix-2 test vector.
//!
//! The text form is the masked ID in Crockford's base32, 13 symbols, most significant first:
//! digits and capital letters without I, L, O and U, so that it reads aloud without ambiguity.
//! Reading it accepts lowercase, and I, L and O for the 1 and 0 they are mistaken for.

use aes::cipher::BlockCipherEncrypt;
use aes::{Aes128, Aes192, Aes256};
use fpe::ff1::{NumeralString, Operations, FF1};
use std::fmt;

/// The number of bits masked: every bit of a non-negative `bigint`.
pub const BITS: u32 = 63;
/// The largest value the mask takes and gives: `bigint`'s maximum, 2^63 - 1.
pub const MAX: i64 = i64::MAX;
/// The length of the text form: 13 symbols of 5 bits hold 63 bits.
pub const TEXT_LEN: usize = 13;

/// A key's hexadecimal lengths, with the AES variant each selects.
pub const KEY_HEX_LENGTHS: [usize; 3] = [32, 48, 64];

/// The mask under one key. Deriving it (the AES key schedule) is the costly part: build it once
/// per key, and call [`Mask::mask`] and [`Mask::unmask`] as often as needed.
pub struct Mask(Cipher);

enum Cipher {
    Aes128(FF1<Aes128>),
    Aes192(FF1<Aes192>),
    Aes256(FF1<Aes256>),
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
        let bytes = parse_hex(key)?;
        let cipher = match bytes.len() {
            16 => Cipher::Aes128(ff1(&bytes)),
            24 => Cipher::Aes192(ff1(&bytes)),
            _ => Cipher::Aes256(ff1(&bytes)),
        };
        Ok(Mask(cipher))
    }

    /// The masked form of `id`, from 0 to 2^63 - 1 like `id`.
    pub fn mask(&self, id: i64) -> Result<i64, Negative> {
        self.apply(id, Direction::Encrypt)
    }

    /// The ID whose masked form is `masked`: `unmask(mask(id)) == id` for every ID.
    pub fn unmask(&self, masked: i64) -> Result<i64, Negative> {
        self.apply(masked, Direction::Decrypt)
    }

    fn apply(&self, value: i64, direction: Direction) -> Result<i64, Negative> {
        let bits = Bits::of(value)?;
        Ok(match &self.0 {
            Cipher::Aes128(f) => direction.apply(f, &bits),
            Cipher::Aes192(f) => direction.apply(f, &bits),
            Cipher::Aes256(f) => direction.apply(f, &bits),
        }
        .value())
    }
}

/// FF1's two directions, over any of the three AES key lengths.
#[derive(Clone, Copy)]
pub enum Direction {
    Encrypt,
    Decrypt,
}

impl Direction {
    /// FF1 in this direction, with the empty tweak, over any numeral string of radix 2 long
    /// enough for FF1 (20 numerals or more).
    pub fn apply<C, N>(self, f: &FF1<C>, x: &N) -> N
    where
        C: BlockCipherEncrypt + Clone,
        N: NumeralString,
    {
        match self {
            Direction::Encrypt => f.encrypt(&[], x),
            Direction::Decrypt => f.decrypt(&[], x),
        }
        .expect(WITHIN_FF1)
    }
}

/// FF1 refuses only a radix other than 2 to 2^16, or a numeral string shorter than its minimum
/// (20 bits for radix 2) or of numerals outside the radix: never the mask's 63 bits of radix 2.
const WITHIN_FF1: &str = "a numeral string of radix 2 within FF1's lengths";

fn ff1<C: aes::cipher::KeyInit>(key: &[u8]) -> FF1<C> {
    FF1::new(key, 2).expect("radix 2 is within FF1's radixes")
}

/// Whether a key is well formed (32, 48 or 64 hexadecimal digits), without deriving the mask.
pub fn check_key(key: &str) -> Result<(), KeyError> {
    parse_hex(key).map(drop)
}

/// The bytes of a key written in hexadecimal, checked for its length first.
fn parse_hex(key: &str) -> Result<Vec<u8>, KeyError> {
    let length = key.chars().count();
    if !KEY_HEX_LENGTHS.contains(&length) {
        return Err(KeyError::Length(length));
    }
    if let Some(position) = key.chars().position(|c| !c.is_ascii_hexdigit()) {
        return Err(KeyError::NotHex(position + 1));
    }
    // Every character is an ASCII hexadecimal digit now.
    let nibble = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    Ok(key
        .as_bytes()
        .chunks(2)
        .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
        .collect())
}

/// A numeral string of radix 2 of at most 64 numerals, held in one `u64`: its numerals are the
/// low `len` bits of `value`, the most significant first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits {
    value: u64,
    len: u32,
}

impl Bits {
    /// The low `len` bits of `value`, as a numeral string of `len` numerals (1 to 64).
    pub fn new(value: u64, len: u32) -> Bits {
        assert!((1..=64).contains(&len), "a numeral string of 1 to 64 bits");
        Bits {
            value: value & low_bits(len),
            len,
        }
    }

    fn of(id: i64) -> Result<Bits, Negative> {
        u64::try_from(id)
            .map(|value| Bits::new(value, BITS))
            .map_err(|_| Negative(id))
    }

    /// The number the numerals stand for.
    pub fn number(self) -> u64 {
        self.value
    }

    /// The value of a 63-bit numeral string as a non-negative `bigint`.
    fn value(self) -> i64 {
        debug_assert_eq!(self.len, BITS);
        self.value as i64
    }
}

/// `2^len - 1`, for `len` from 1 to 64.
fn low_bits(len: u32) -> u64 {
    u64::MAX >> (64 - len)
}

/// The big-endian bytes of at most 8 bytes of a number: STR^b_256 of FF1.
pub struct BeBytes {
    bytes: [u8; 8],
    len: usize,
}

impl AsRef<[u8]> for BeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[8 - self.len..]
    }
}

/// The number a big-endian byte string stands for, modulo 2^64: enough for a sum or difference
/// modulo 2^m with m at most 64, which 2^64 is a multiple of.
fn number_mod_2_64(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0u64, |n, byte| (n << 8) | u64::from(byte))
}

impl NumeralString for Bits {
    type Ops = Bits;

    fn is_valid(&self, radix: u32) -> bool {
        radix == 2
    }

    fn numeral_count(&self) -> usize {
        self.len as usize
    }

    /// FF1's A and B: the first `floor(n / 2)` numerals and the other `n - floor(n / 2)`.
    fn split(&self) -> (Bits, Bits) {
        let u = self.len / 2;
        let v = self.len - u;
        (Bits::new(self.value >> v, u), Bits::new(self.value, v))
    }

    fn concat(a: Bits, b: Bits) -> Bits {
        Bits::new((a.value << b.len) | b.value, a.len + b.len)
    }
}

impl Operations for Bits {
    type Bytes = BeBytes;

    fn numeral_count(&self) -> usize {
        self.len as usize
    }

    /// NUM_2 of the numerals, in `b` big-endian bytes. FF1 asks for `b = ceil(v / 8)` bytes of
    /// the longer half, at most 4 for 64 numerals.
    fn to_be_bytes(&self, radix: u32, b: usize) -> BeBytes {
        debug_assert_eq!(radix, 2);
        assert!(b <= 8, "a half of at most 32 bits needs at most 4 bytes");
        BeBytes {
            bytes: self.value.to_be_bytes(),
            len: b,
        }
    }

    /// `(NUM(self) + NUM(other)) mod 2^m`, as `m` numerals.
    fn add_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Bits {
        debug_assert_eq!(radix, 2);
        let m = m as u32;
        Bits::new(self.value.wrapping_add(number_mod_2_64(other)), m)
    }

    /// `(NUM(self) - NUM(other)) mod 2^m`, as `m` numerals.
    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Bits {
        debug_assert_eq!(radix, 2);
        let m = m as u32;
        Bits::new(self.value.wrapping_sub(number_mod_2_64(other)), m)
    }
}

/// Crockford's base32 alphabet, in ASCII order, so that the text form sorts as the number does.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The text form of a masked ID: 13 symbols of Crockford's base32, most significant first.
pub fn to_text(masked: i64) -> Result<String, Negative> {
    let value = u64::try_from(masked).map_err(|_| Negative(masked))?;
    Ok((0..TEXT_LEN)
        .rev()
        .map(|i| ALPHABET[((value >> (5 * i)) & 31) as usize] as char)
        .collect())
}

/// Why a text is not the text form of a masked ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextError {
    /// Not 13 characters; the number it has.
    Length(usize),
    /// This character, at this position (counting from 1), is not a symbol of the alphabet.
    Symbol(usize, char),
    /// 13 symbols, but above 2^63 - 1: the first is above 7.
    OutOfRange,
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextError::Length(n) => write!(f, "it has {n} characters, not {TEXT_LEN}"),
            // A character outside ASCII as its code point, which reads the same in any encoding.
            TextError::Symbol(position, c) if c.is_ascii_graphic() => write!(
                f,
                "character {position}, '{c}', is not a symbol of Crockford's base32 (0-9 and A-Z without U)"
            ),
            TextError::Symbol(position, c) => write!(
                f,
                "character {position}, U+{:04X}, is not a symbol of Crockford's base32 (0-9 and A-Z without U)",
                u32::from(*c)
            ),
            TextError::OutOfRange => {
                write!(f, "its first symbol is above 7, so it is beyond every masked ID")
            }
        }
    }
}

/// The masked ID a text form stands for. Case does not matter, and I, L and O read as 1, 1 and 0.
pub fn from_text(text: &str) -> Result<i64, TextError> {
    let count = text.chars().count();
    if count != TEXT_LEN {
        return Err(TextError::Length(count));
    }
    let mut value = 0u64;
    for (i, c) in text.chars().enumerate() {
        let symbol = symbol_value(c).ok_or(TextError::Symbol(i + 1, c))?;
        value = (value << 5) | u64::from(symbol);
        if i == 0 && symbol > 7 {
            return Err(TextError::OutOfRange);
        }
    }
    Ok(value as i64)
}

fn symbol_value(c: char) -> Option<u8> {
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

#[cfg(test)]
mod tests;
