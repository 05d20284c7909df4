//! FF1 (NIST SP 800-38G, Algorithm 7 and 8) over exactly the numeral strings the mask uses:
//! radix 2, 63 numerals, a tweak of any length, under AES-128, -192 or -256.
//!
//! With those parameters every quantity of the algorithm is fixed: `u = 31`, `v = 32`,
//! `b = 4`, `d = 8`, and the PRF's input is `P || Q` where `P` (16 bytes) depends only on the
//! tweak's length and `Q` is the tweak, zeros up to a multiple of 16 bytes less 5, the round
//! number and the 4 bytes of one half. Every block of `P || Q` but the last is the same in every
//! round of every call under one key and tweak, and so is the last block but its last 5 bytes:
//! [`Domain`] holds the CBC-MAC state over all of that, computed once, so that each of the 10
//! rounds is one AES block. `S` is the first 8 bytes of `R` (`d <= 16`), so no round needs a
//! second block. Only AES's encryption is used, with an encrypt-only key schedule.
//!
//! The general implementation of the `fpe` crate is the reference this one is tested against
//! (`tests.rs`), with NIST's samples and the known answers of an independent implementation.

use aes::cipher::{Array, BlockCipherEncrypt, KeyInit};
use aes::{Aes128Enc, Aes192Enc, Aes256Enc};

/// The number of numerals: every bit of a non-negative `bigint`.
pub const N: u32 = 63;
/// The first half's length, `u = floor(n / 2)`.
const U: u32 = N / 2;
/// The second half's length, `v = n - u`.
const V: u32 = N - U;
/// The bytes of a half in `Q`: `b = ceil(v / 8)`.
const B: usize = V.div_ceil(8) as usize;
/// FF1's rounds.
const ROUNDS: u8 = 10;

/// AES under one key, encryption only, at any of the three key lengths.
pub enum Cipher {
    Aes128(Aes128Enc),
    Aes192(Aes192Enc),
    Aes256(Aes256Enc),
}

impl Cipher {
    /// The cipher of a 16-, 24- or 32-byte key; `None` for any other length.
    pub fn new(key: &[u8]) -> Option<Cipher> {
        Some(match key.len() {
            16 => Cipher::Aes128(Aes128Enc::new_from_slice(key).ok()?),
            24 => Cipher::Aes192(Aes192Enc::new_from_slice(key).ok()?),
            32 => Cipher::Aes256(Aes256Enc::new_from_slice(key).ok()?),
            _ => return None,
        })
    }

    /// `CIPH_K(block)`.
    #[inline]
    pub fn encrypt(&self, block: [u8; 16]) -> [u8; 16] {
        let mut block = Array::from(block);
        match self {
            Cipher::Aes128(c) => c.encrypt_block(&mut block),
            Cipher::Aes192(c) => c.encrypt_block(&mut block),
            Cipher::Aes256(c) => c.encrypt_block(&mut block),
        }
        block.into()
    }

    /// FF1's state for one tweak under this key: computed once, used for every call.
    pub fn domain(&self, tweak: &[u8]) -> Domain {
        let t = u32::try_from(tweak.len()).expect("a tweak shorter than 2^32 bytes");
        // P = [1]^1 || [2]^1 || [1]^1 || [radix]^3 || [10]^1 || [u mod 256]^1 || [n]^4 || [t]^4
        let mut p = [1, 2, 1, 0, 0, 2, 10, U as u8, 0, 0, 0, N as u8, 0, 0, 0, 0];
        p[12..].copy_from_slice(&t.to_be_bytes());
        let mut y = self.encrypt(p);
        // Q = T || [0]^((-t-b-1) mod 16) || [i]^1 || [NUM(B)]^b: every block of T and its
        // zeros before the last goes through CBC-MAC now.
        let pad = (16 - (tweak.len() + B + 1) % 16) % 16;
        let fixed = tweak.len() + pad + 1 + B - 16;
        let mut q = tweak.iter().copied().chain(std::iter::repeat(0));
        for _ in 0..fixed / 16 {
            for byte in &mut y {
                *byte ^= q.next().unwrap_or(0);
            }
            y = self.encrypt(y);
        }
        // The last block's first 11 bytes are the rest of T and its zeros.
        for byte in &mut y[..16 - 1 - B] {
            *byte ^= q.next().unwrap_or(0);
        }
        Domain { chained: y }
    }

    /// One round's `y = NUM(S)`: `S` is the first 8 bytes of `R = PRF(P || Q)`.
    #[inline(always)]
    fn round(&self, domain: &Domain, i: u8, half: u32) -> u64 {
        let mut block = domain.chained;
        block[11] ^= i;
        for (byte, h) in block[12..].iter_mut().zip(half.to_be_bytes()) {
            *byte ^= h;
        }
        let r = self.encrypt(block);
        u64::from_be_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]])
    }

    /// FF1.Encrypt of the 63 low bits of `x`, most significant first.
    #[inline]
    pub fn encrypt_63(&self, domain: &Domain, x: u64) -> u64 {
        let (mut a, mut b) = ((x >> V) & low(U), x & low(V));
        for i in 0..ROUNDS {
            let m = if i % 2 == 0 { U } else { V };
            let c = a.wrapping_add(self.round(domain, i, b as u32)) & low(m);
            (a, b) = (b, c);
        }
        (a << V) | b
    }

    /// FF1.Decrypt of the 63 low bits of `y`: `decrypt_63(encrypt_63(x)) == x`.
    #[inline]
    pub fn decrypt_63(&self, domain: &Domain, y: u64) -> u64 {
        let (mut a, mut b) = ((y >> V) & low(U), y & low(V));
        for i in (0..ROUNDS).rev() {
            let m = if i % 2 == 0 { U } else { V };
            let c = b.wrapping_sub(self.round(domain, i, a as u32)) & low(m);
            (a, b) = (c, a);
        }
        (a << V) | b
    }
}

/// The CBC-MAC state of FF1's PRF over `P` and every fixed byte of `Q` for one tweak: the last
/// block's chaining value, already combined with that block's fixed first 11 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Domain {
    chained: [u8; 16],
}

/// `2^bits - 1`.
const fn low(bits: u32) -> u64 {
    (1 << bits) - 1
}
