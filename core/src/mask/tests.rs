use super::*;
use fpe::ff1::FlexibleNumeralString;
use proptest::prelude::*;

const KEY_128: &str = "2B7E151628AED2A6ABF7158809CF4F3C";
const KEY_192: &str = "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F";
const KEY_256: &str = "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94";

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Numerals of radix up to 36 written as digits and lowercase letters, as NIST writes them.
fn numerals(text: &str) -> Vec<u16> {
    text.chars()
        .map(|c| c.to_digit(36).unwrap() as u16)
        .collect()
}

/// FF1 through the crate's general numeral strings, for any key length, radix and tweak.
fn ff1_general(key: &str, radix: u32, tweak: &[u8], pt: Vec<u16>, encrypt: bool) -> Vec<u16> {
    fn run<C: aes::cipher::KeyInit + BlockCipherEncrypt + Clone>(
        key: &[u8],
        radix: u32,
        tweak: &[u8],
        x: &FlexibleNumeralString,
        encrypt: bool,
    ) -> FlexibleNumeralString {
        let f = FF1::<C>::new(key, radix).unwrap();
        if encrypt {
            f.encrypt(tweak, x)
        } else {
            f.decrypt(tweak, x)
        }
        .unwrap()
    }
    let key = bytes(key);
    let x = FlexibleNumeralString::from(pt);
    match key.len() {
        16 => run::<Aes128>(&key, radix, tweak, &x, encrypt),
        24 => run::<Aes192>(&key, radix, tweak, &x, encrypt),
        _ => run::<Aes256>(&key, radix, tweak, &x, encrypt),
    }
    .into()
}

/// The nine samples of NIST's "FF1 examples" (FF1samples.pdf, Cryptographic Standards and
/// Guidelines): the same FF1 and AES the mask is built on, at each of its three key lengths.
/// Those samples are of radix 10 and 36, so they run through the crate's general numeral strings;
/// the radix-2 vectors below check [`Bits`].
#[test]
fn nist_ff1_samples() {
    const TWEAK_10: &[u8] = b"9876543210";
    const TWEAK_11: &[u8] = b"7777pqrs777";
    const PT_10: &str = "0123456789";
    const PT_36: &str = "0123456789abcdefghi";
    let samples: [(&str, u32, &[u8], &str, &str); 9] = [
        (KEY_128, 10, b"", PT_10, "2433477484"),
        (KEY_128, 10, TWEAK_10, PT_10, "6124200773"),
        (KEY_128, 36, TWEAK_11, PT_36, "a9tv40mll9kdu509eum"),
        (KEY_192, 10, b"", PT_10, "2830668132"),
        (KEY_192, 10, TWEAK_10, PT_10, "2496655549"),
        (KEY_192, 36, TWEAK_11, PT_36, "xbj3kv35jrawxv32ysr"),
        (KEY_256, 10, b"", PT_10, "6657667009"),
        (KEY_256, 10, TWEAK_10, PT_10, "1001623463"),
        (KEY_256, 36, TWEAK_11, PT_36, "xs8a0azh2avyalyzuwd"),
    ];
    for (number, (key, radix, tweak, pt, ct)) in samples.into_iter().enumerate() {
        let sample = number + 1;
        assert_eq!(
            ff1_general(key, radix, tweak, numerals(pt), true),
            numerals(ct),
            "NIST sample {sample} encrypts"
        );
        assert_eq!(
            ff1_general(key, radix, tweak, numerals(ct), false),
            numerals(pt),
            "NIST sample {sample} decrypts"
        );
    }
}

/// Radix-2 vectors: Zcash's (88 bits, AES-256, from its published FF1 test vectors), run through
/// the general numeral strings.
#[test]
fn zcash_radix_2_vectors() {
    let bits = |hex: &str| -> Vec<u16> {
        bytes(hex)
            .iter()
            .flat_map(|byte| (0..8).rev().map(move |i| u16::from((byte >> i) & 1)))
            .collect()
    };
    // Zcash writes each byte's bits least significant first.
    let zcash = |hex: &str| -> Vec<u16> {
        bits(hex)
            .chunks(8)
            .flat_map(|c| c.iter().rev().copied().collect::<Vec<_>>())
            .collect()
    };
    let tweak: Vec<u8> = (0..=254).collect();
    let vectors: [(&[u8], &str, &str); 4] = [
        (&[], "0000000000000000000000", "90acee3f83cde7ae5622f3"),
        (&[], "90acee3f83cde7ae5622f3", "5b8bf120f39bab8527ea1b"),
        (&[], "aaaaaaaaaaaaaaaaaaaaaa", "f082b7ee8f29c07691ce64"),
        (&tweak, "aaaaaaaaaaaaaaaaaaaaaa", "be11b886a8059c27517bc5"),
    ];
    for (tweak, pt, ct) in vectors {
        assert_eq!(ff1_general(KEY_256, 2, tweak, zcash(pt), true), zcash(ct));
        assert_eq!(ff1_general(KEY_256, 2, tweak, zcash(ct), false), zcash(pt));
    }
}

/// A published radix-2 vector [`Bits`] can hold (32 bits, AES-256 with the zero key, from the
/// fpe crate's own vectors): the arithmetic of [`Bits`] is FF1's.
#[test]
fn bits_meet_a_radix_2_vector() {
    let f = FF1::<Aes256>::new(&[0; 32], 2).unwrap();
    let expected = 0b1101_1110_1001_1111_0010_0000_1101_1000;
    let ct = f.encrypt(&[], &Bits::new(0, 32)).unwrap();
    assert_eq!(ct, Bits::new(expected, 32));
    assert_eq!(f.decrypt(&[], &ct).unwrap(), Bits::new(0, 32));
    let general = ff1_general(&"00".repeat(32), 2, &[], vec![0; 32], true);
    let general = general
        .iter()
        .fold(0u64, |n, &bit| (n << 1) | u64::from(bit));
    assert_eq!(general, expected);
}

fn mask_by_the_crate(key: &str, id: i64, encrypt: bool) -> i64 {
    let pt: Vec<u16> = (0..BITS).rev().map(|i| ((id >> i) & 1) as u16).collect();
    let ct = ff1_general(key, 2, &[], pt, encrypt);
    ct.iter().fold(0i64, |n, &bit| (n << 1) | i64::from(bit))
}

fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 16),
        proptest::collection::vec(any::<u8>(), 24),
        proptest::collection::vec(any::<u8>(), 32),
    ]
    .prop_map(|key| key.iter().map(|b| format!("{b:02x}")).collect())
}

fn any_id() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(MAX - 1),
        Just(MAX),
        0..=MAX,
        // IDs of the 41/13/10 layout, dated within a century of the epoch.
        (0i64..1 << 41, 0i64..8192, 0i64..1024)
            .prop_map(|(ms, shard, seq)| { ((ms & ((1 << 40) - 1)) << 23) | (shard << 10) | seq }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Unmasking gives back every ID, and the masked form is a non-negative bigint, at every key
    /// length: the mask is injective on 0..=2^63-1, and so (the domain being finite) a bijection.
    #[test]
    fn unmask_inverts_mask(key in any_key(), id in any_id()) {
        let mask = Mask::from_hex(&key).unwrap();
        let masked = mask.mask(id).unwrap();
        prop_assert!(masked >= 0);
        prop_assert_eq!(mask.unmask(masked).unwrap(), id);
    }

    /// ... and every value is the masked form of the ID it unmasks to: nothing of the range is
    /// left out.
    #[test]
    fn mask_inverts_unmask(key in any_key(), masked in any_id()) {
        let mask = Mask::from_hex(&key).unwrap();
        let id = mask.unmask(masked).unwrap();
        prop_assert!(id >= 0);
        prop_assert_eq!(mask.mask(id).unwrap(), masked);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The mask is FF1 of the ID's 63 bits, as the crate computes it with its general numeral
    /// strings: [`Bits`] changes the arithmetic's representation, not its result.
    #[test]
    fn the_mask_is_ff1_of_the_63_bits(key in any_key(), id in any_id()) {
        let mask = Mask::from_hex(&key).unwrap();
        prop_assert_eq!(mask.mask(id).unwrap(), mask_by_the_crate(&key, id, true));
        prop_assert_eq!(mask.unmask(id).unwrap(), mask_by_the_crate(&key, id, false));
    }

    /// Each half of any numeral string up to 64 bits goes through FF1 as the crate's would.
    #[test]
    fn bits_agree_with_the_crate_at_every_length(len in 20u32..=64, value in any::<u64>()) {
        let f = FF1::<Aes128>::new(&bytes(KEY_128), 2).unwrap();
        let ours = f.encrypt(&[], &Bits::new(value, len)).unwrap();
        let pt: Vec<u16> = (0..len).rev().map(|i| ((value >> i) & 1) as u16).collect();
        let theirs: Vec<u16> = f.encrypt(&[], &FlexibleNumeralString::from(pt)).unwrap().into();
        prop_assert_eq!(ours.number(), theirs.iter().fold(0u64, |n, &b| (n << 1) | u64::from(b)));
    }

    /// The text form reads back as the value, and sorts as the value does.
    #[test]
    fn text_round_trips_and_sorts(a in any_id(), b in any_id()) {
        let (ta, tb) = (to_text(a).unwrap(), to_text(b).unwrap());
        prop_assert_eq!(ta.len(), TEXT_LEN);
        prop_assert_eq!(from_text(&ta).unwrap(), a);
        prop_assert_eq!(from_text(&ta.to_lowercase()).unwrap(), a);
        prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
    }
}

#[test]
fn the_ends_of_the_range() {
    let mask = Mask::from_hex(KEY_128).unwrap();
    for id in [0, 1, MAX - 1, MAX] {
        let masked = mask.mask(id).unwrap();
        assert!((0..=MAX).contains(&masked));
        assert_eq!(mask.unmask(masked).unwrap(), id);
        assert_eq!(mask.mask(mask.unmask(id).unwrap()).unwrap(), id);
    }
    assert_eq!(mask.mask(-1), Err(Negative(-1)));
    assert_eq!(mask.unmask(i64::MIN), Err(Negative(i64::MIN)));
    assert_eq!(to_text(0).unwrap(), "0000000000000");
    assert_eq!(to_text(MAX).unwrap(), "7ZZZZZZZZZZZZ");
    assert_eq!(to_text(-5), Err(Negative(-5)));
}

#[test]
fn keys_of_each_length_differ() {
    let id = 7_000_000_000_000_000_000;
    let masks: Vec<i64> = [KEY_128, KEY_192, KEY_256, &KEY_128.to_lowercase()]
        .iter()
        .map(|key| Mask::from_hex(key).unwrap().mask(id).unwrap())
        .collect();
    assert_ne!(masks[0], masks[1]);
    assert_ne!(masks[0], masks[2]);
    assert_ne!(masks[1], masks[2]);
    assert_eq!(masks[0], masks[3], "the key's case does not matter");
    let other = Mask::from_hex(&"0".repeat(32)).unwrap().mask(id).unwrap();
    assert_ne!(masks[0], other);
}

#[test]
fn malformed_keys_are_refused_without_repeating_them() {
    assert_eq!(Mask::from_hex("").err(), Some(KeyError::Length(0)));
    assert_eq!(
        Mask::from_hex(&"a".repeat(31)).err(),
        Some(KeyError::Length(31))
    );
    assert_eq!(
        Mask::from_hex(&"a".repeat(33)).err(),
        Some(KeyError::Length(33))
    );
    assert_eq!(
        Mask::from_hex(&"a".repeat(40)).err(),
        Some(KeyError::Length(40))
    );
    let with_g = format!("{}g{}", "a".repeat(10), "a".repeat(21));
    assert_eq!(Mask::from_hex(&with_g).err(), Some(KeyError::NotHex(11)));
    let spaced = format!(" {}", &KEY_128[1..]);
    assert_eq!(Mask::from_hex(&spaced).err(), Some(KeyError::NotHex(1)));
    // 32 bytes, but 31 characters: the length counts characters.
    let accented = format!("é{}", "a".repeat(30));
    assert_eq!(Mask::from_hex(&accented).err(), Some(KeyError::Length(31)));
    let accented = format!("{}é{}", "a".repeat(4), "a".repeat(27));
    assert_eq!(Mask::from_hex(&accented).err(), Some(KeyError::NotHex(5)));
    for error in [KeyError::Length(31), KeyError::NotHex(11)] {
        assert!(!error.to_string().contains("aaaa"));
    }
}

#[test]
fn text_reads_crockfords_aliases_and_refuses_the_rest() {
    let canonical = to_text(0x0123_4567_89AB_CDEF & MAX).unwrap();
    let value = from_text(&canonical).unwrap();
    assert_eq!(from_text(&canonical.to_lowercase()), Ok(value));
    assert_eq!(from_text("0000000000001"), Ok(1));
    assert_eq!(from_text("000000000000I"), Ok(1));
    assert_eq!(from_text("000000000000l"), Ok(1));
    assert_eq!(from_text("O00000000000o"), Ok(0));
    assert_eq!(from_text("7zzzzzzzzzzzz"), Ok(MAX));
    assert_eq!(from_text(""), Err(TextError::Length(0)));
    assert_eq!(from_text("000000000000"), Err(TextError::Length(12)));
    assert_eq!(from_text("00000000000000"), Err(TextError::Length(14)));
    assert_eq!(from_text("000000000000U"), Err(TextError::Symbol(13, 'U')));
    assert_eq!(from_text("00000-0000000"), Err(TextError::Symbol(6, '-')));
    assert_eq!(from_text("0000000000 00"), Err(TextError::Symbol(11, ' ')));
    assert_eq!(from_text("00000000000é0"), Err(TextError::Symbol(12, 'é')));
    assert_eq!(from_text("8000000000000"), Err(TextError::OutOfRange));
    assert_eq!(from_text("ZZZZZZZZZZZZZ"), Err(TextError::OutOfRange));
}

/// Spearman's rank correlation of two equally long samples without ties.
fn spearman(x: &[i64], y: &[i64]) -> f64 {
    fn ranks(v: &[i64]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..v.len()).collect();
        order.sort_by_key(|&i| v[i]);
        let mut rank = vec![0.0; v.len()];
        for (r, i) in order.into_iter().enumerate() {
            rank[i] = r as f64;
        }
        rank
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let d2: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - b) * (a - b)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

/// IDs as one shard issues them: 1,024 a millisecond, then the next millisecond.
fn consecutive_ids(count: i64) -> Vec<i64> {
    let first_ms = 30_000_000_000i64;
    (0..count)
        .map(|i| ((first_ms + i / 1024) << 23) | (5 << 10) | (i % 1024))
        .collect()
}

/// Without the key, masked IDs of consecutive rows are not ordered: their rank correlation with
/// the IDs is near 0 (its standard deviation for unrelated samples of this size is about 0.003),
/// where any order-keeping or nearly order-keeping mask gives near 1.
#[test]
fn masked_consecutive_ids_are_not_ordered() {
    let ids = consecutive_ids(200_000);
    let mask = Mask::from_hex(KEY_128).unwrap();
    let masked: Vec<i64> = ids.iter().map(|&id| mask.mask(id).unwrap()).collect();
    assert!(
        (spearman(&ids, &ids) - 1.0).abs() < 1e-9,
        "the statistic sees order"
    );
    let rho = spearman(&ids, &masked);
    assert!(rho.abs() < 0.02, "rank correlation {rho}");
    // Neither do neighbours' masked values follow each other.
    let successive: Vec<i64> = masked[1..].to_vec();
    let rho_next = spearman(&masked[..masked.len() - 1], &successive);
    assert!(
        rho_next.abs() < 0.02,
        "rank correlation of neighbours {rho_next}"
    );
}

/// ... not close: two consecutive IDs' masked values are as far apart as two random values
/// (a third of the range on average); and they say nothing of shard or time: the masked values
/// of one shard's IDs, issued within a few seconds, fill the shard and time fields of the layout
/// evenly.
#[test]
fn masked_consecutive_ids_are_not_close_and_keep_no_fields() {
    let ids = consecutive_ids(100_000);
    let mask = Mask::from_hex(KEY_256).unwrap();
    let masked: Vec<i64> = ids.iter().map(|&id| mask.mask(id).unwrap()).collect();
    let close = masked
        .windows(2)
        .filter(|w| (w[0] - w[1]).unsigned_abs() < 1 << 53)
        .count();
    // Two random values are within 2^53 of each other with probability about 2^-9: ~195 of
    // 100,000 pairs.
    assert!(close < 400, "{close} neighbours within 2^53");
    let mean_gap = masked
        .windows(2)
        .map(|w| (w[0] - w[1]).unsigned_abs() as f64)
        .sum::<f64>()
        / (masked.len() - 1) as f64;
    let third = MAX as f64 / 3.0;
    assert!((mean_gap / third - 1.0).abs() < 0.02, "mean gap {mean_gap}");
    let mut shards = vec![0u32; 8192];
    let mut top_bits = [0u32; 16];
    for m in &masked {
        shards[((m >> 10) & 8191) as usize] += 1;
        top_bits[(m >> 59) as usize] += 1;
    }
    let empty_shards = shards.iter().filter(|&&n| n == 0).count();
    // 100,000 values over 8,192 shards leave about e^-12.2 of them empty: none, in practice.
    assert!(empty_shards < 5, "{empty_shards} shard fields never taken");
    // The top 4 bits (the oldest part of the time field) take each value ~6,250 times.
    for n in top_bits {
        assert!((5_600..6_900).contains(&n), "top bits {top_bits:?}");
    }
}
