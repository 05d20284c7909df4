use super::keys::{self, check_permissions, derive, fingerprint, KeyFile, PermissionError, Secret};
use super::text::{check_prefix, format, parse, PrefixError, Unit, Version};
use super::*;
use aes::cipher::BlockCipherEncrypt;
use aes::{Aes128, Aes192, Aes256};
use fpe::ff1::{FlexibleNumeralString, FF1};
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
/// They check the reference the specialised FF1 is compared with below.
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

/// Radix-2 vectors of the reference: Zcash's (88 bits, AES-256, from its published FF1 test
/// vectors).
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

fn mask_by_the_crate(key: &str, tweak: &[u8], id: i64, encrypt: bool) -> i64 {
    let pt: Vec<u16> = (0..BITS).rev().map(|i| ((id >> i) & 1) as u16).collect();
    let ct = ff1_general(key, 2, tweak, pt, encrypt);
    ct.iter().fold(0i64, |n, &bit| (n << 1) | i64::from(bit))
}

/// Known answers of an implementation written from SP 800-38G independently of this code and
/// of the `fpe` crate, under NIST's sample key: what a client computing the mask itself checks
/// against. They are 0.7.0's values: version 1 of a key, no domain, no prefix.
#[test]
fn known_answers_of_an_independent_implementation() {
    let mask = Mask::from_hex(KEY_128).unwrap();
    assert_eq!(mask.mask(0), Ok(7_407_393_923_982_924_685));
    assert_eq!(mask.mask(1), Ok(967_355_656_107_369_710));
    assert_eq!(mask.mask(MAX), Ok(3_989_821_467_963_092_630));
    assert_eq!(
        to_text(mask.mask(8_388_613_127).unwrap()).unwrap(),
        "2D476KTY36P9K"
    );
    for (id, masked) in [(0, 7_407_393_923_982_924_685), (1, 967_355_656_107_369_710)] {
        assert_eq!(mask.unmask(masked), Ok(id));
    }
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

    /// At every key length, unmasking gives back every ID, and the masked form is a
    /// non-negative bigint (the mask is injective on 0..=2^63-1); and every value is the masked
    /// form of the ID it unmasks to (nothing of the range is left out): a bijection.
    #[test]
    fn mask_and_unmask_invert_each_other(key in any_key(), value in any_id()) {
        let mask = Mask::from_hex(&key).unwrap();
        let masked = mask.mask(value).unwrap();
        prop_assert!(masked >= 0);
        prop_assert_eq!(mask.unmask(masked).unwrap(), value);
        let unmasked = mask.unmask(value).unwrap();
        prop_assert!(unmasked >= 0);
        prop_assert_eq!(mask.mask(unmasked).unwrap(), value);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// The mask is FF1 of the 63 bits, as the crate computes it with its general numeral
    /// strings, under every key length and with tweaks of every length up to 40 bytes (each
    /// length puts the tweak's end at another place of the PRF's blocks): the specialised FF1
    /// changes how it is computed, not what.
    #[test]
    fn the_mask_is_ff1_of_the_63_bits(
        key in any_key(),
        id in any_id(),
        tweak in proptest::collection::vec(any::<u8>(), 0..=40),
    ) {
        let mask = Mask::from_hex(&key).unwrap();
        let domain = mask.domain(&tweak);
        prop_assert_eq!(mask.mask_in(&domain, id).unwrap(), mask_by_the_crate(&key, &tweak, id, true));
        prop_assert_eq!(mask.unmask_in(&domain, id).unwrap(), mask_by_the_crate(&key, &tweak, id, false));
    }

    /// The text form reads back as the value, in every version and with a prefix, and sorts as
    /// the value does.
    #[test]
    fn text_round_trips_and_sorts(a in any_id(), b in any_id()) {
        let (ta, tb) = (to_text(a).unwrap(), to_text(b).unwrap());
        prop_assert_eq!(ta.len(), TEXT_LEN);
        prop_assert_eq!(from_text(&ta).unwrap(), a);
        prop_assert_eq!(from_text(&ta.to_lowercase()).unwrap(), a);
        prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
        for (version, prefix) in [(2, ""), (31, "ord"), (1, "a_b"), (9, "X")] {
            let version = Version::new(version).unwrap();
            let text = format(a, version, prefix).unwrap();
            prop_assert_eq!(parse(text.chars().map(Unit::Char), prefix), Ok((version, a)));
            let lower = text.to_lowercase();
            prop_assert_eq!(parse(lower.chars().map(Unit::Char), prefix), Ok((version, a)));
        }
    }
}

/// Domains keep tables apart: one ID has unrelated public forms in two domains, and a form of
/// one domain unmasks in another to an unrelated ID. The empty domain is the mask without one.
#[test]
fn domains_give_one_id_unrelated_forms() {
    let mask = Mask::from_hex(KEY_128).unwrap();
    let (orders, users) = (mask.domain(b"orders"), mask.domain(b"users"));
    assert_eq!(mask.domain(b""), mask.domain(&[]));
    assert_eq!(mask.mask_in(&mask.domain(b""), 42), mask.mask(42));
    let mut same = 0;
    for id in 0..10_000i64 {
        let (o, u) = (
            mask.mask_in(&orders, id).unwrap(),
            mask.mask_in(&users, id).unwrap(),
        );
        same += usize::from(o == u);
        assert_ne!(mask.unmask_in(&users, o).unwrap(), id);
    }
    assert_eq!(same, 0);
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

fn read(text: &str) -> Result<(Version, i64), TextError> {
    parse(text.chars().map(Unit::Char), "")
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
    let symbol = |position, c| Err(TextError::Symbol(position, Unit::Char(c)));
    assert_eq!(from_text("000000000000U"), symbol(13, 'U'));
    assert_eq!(from_text("00000-0000000"), symbol(6, '-'));
    assert_eq!(from_text("0000000000 00"), symbol(11, ' '));
    assert_eq!(from_text("00000000000é0"), symbol(12, 'é'));
    assert_eq!(from_text("8000000000000"), Err(TextError::OutOfRange));
    assert_eq!(from_text("ZZZZZZZZZZZZZ"), Err(TextError::OutOfRange));
    let v = |n| Version::new(n).unwrap();
    // A version symbol, aliases included; 1 is version 1 written out.
    assert_eq!(read("20000000000001"), Ok((v(2), 1)));
    assert_eq!(read("z7zzzzzzzzzzzz"), Ok((v(31), MAX)));
    assert_eq!(read("10000000000001"), Ok((v(1), 1)));
    assert_eq!(read("i0000000000001"), Ok((v(1), 1)));
    assert_eq!(read("00000000000001"), Err(TextError::VersionZero));
    assert_eq!(read("o0000000000001"), Err(TextError::VersionZero));
    assert_eq!(
        read("U0000000000001"),
        Err(TextError::Symbol(1, Unit::Char('U')))
    );
    assert_eq!(read("280000000000000"), Err(TextError::Length(15)));
    assert_eq!(read("28000000000000"), Err(TextError::OutOfRange));
    // A byte that is no character (an SQL_ASCII database's) is named as a byte.
    let bytes = [
        b'0', b'0', 0xE9, b'0', b'0', b'0', b'0', b'0', b'0', b'0', b'0', b'0', b'0',
    ];
    let units = bytes.iter().map(|&b| {
        if b.is_ascii() {
            Unit::Char(b as char)
        } else {
            Unit::Byte(b)
        }
    });
    let error = parse(units, "").unwrap_err();
    assert_eq!(error, TextError::Symbol(3, Unit::Byte(0xE9)));
    assert!(error.to_string().contains("byte 0xE9"), "{error}");
}

#[test]
fn prefixes_are_written_and_checked() {
    let v2 = Version::new(2).unwrap();
    assert_eq!(format(1, v2, "ord").unwrap(), "ord_20000000000001");
    assert_eq!(
        format(1, Version::FIRST, "ord").unwrap(),
        "ord_0000000000001"
    );
    let with = |text: &str, prefix| parse(text.chars().map(Unit::Char), prefix);
    assert_eq!(with("ORD_0000000000001", "ord"), Ok((Version::FIRST, 1)));
    assert_eq!(with("sub_sched_20000000000001", "sub_sched"), Ok((v2, 1)));
    let wrong = Err(TextError::Prefix("ord".into()));
    assert_eq!(with("usr_0000000000001", "ord"), wrong);
    assert_eq!(with("0000000000001", "ord"), wrong);
    assert_eq!(with("ord0000000000001", "ord"), wrong);
    assert_eq!(with("ord_0000000000001", ""), Err(TextError::Length(17)));
    assert_eq!(check_prefix("ord"), Ok(()));
    assert_eq!(check_prefix("sub_sched_2"), Ok(()));
    assert_eq!(check_prefix("or-d"), Err(PrefixError::Character(3)));
    assert_eq!(check_prefix("é"), Err(PrefixError::Character(1)));
    assert_eq!(check_prefix(&"a".repeat(33)), Err(PrefixError::Length(33)));
}

const FILE: &str = "
# database  version  key
*           1        2b7e151628aed2a6abf7158809cf4f3c
*           2        000102030405060708090a0b0c0d0e0f1011121314151617   # comment
app         1        2B7E151628AED2A6ABF7158809CF4F3C
app         3        0c9e4a71d3b5f82604ae19c7b3d5e8f2a4c6b8d0e1f30517a4c6b8d0e1f30517 unmask-only
app         2        8f1d6b2a4c7e9031a5b8d2f4e6c10397
\"my db\"     1        8f1d6b2a4c7e9031a5b8d2f4e6c10397
\"*\"         4        8f1d6b2a4c7e9031a5b8d2f4e6c10397
";

/// A database with lines of its own uses its keys as they are: a 0.7.0 key written as its
/// version 1 masks as 0.7.0 did. The highest version not unmask-only masks.
#[test]
fn a_databases_own_keys_are_used_as_they_are() {
    let file = KeyFile::parse(FILE.as_bytes()).unwrap();
    let app = file.for_database(b"app").unwrap();
    assert!(!app.derived);
    let versions: Vec<u8> = app.versions.iter().map(|v| v.version.number()).collect();
    assert_eq!(versions, [1, 2, 3]);
    assert_eq!(app.masking().version.number(), 2);
    let v1 = app.version(Version::FIRST).unwrap();
    assert_eq!(v1.mask.mask(0), Ok(7_407_393_923_982_924_685));
    assert!(app.version(Version::new(4).unwrap()).is_none());
    let spaced = file.for_database(b"my db").unwrap();
    assert_eq!(spaced.masking().version.number(), 1);
    assert_eq!(
        file.for_database(b"*").unwrap().masking().version.number(),
        4
    );
    assert!(
        app.summary()
            .starts_with(&format!("1:{} 2*:", v1.fingerprint)),
        "{}",
        app.summary()
    );
}

/// Every other database derives its keys from the default's and its name: two databases' keys
/// differ from each other and from the default, at every version, and one database's say
/// nothing of another's (each is an independent CMAC output).
#[test]
fn other_databases_derive_their_keys_from_the_default() {
    let file = KeyFile::parse(FILE.as_bytes()).unwrap();
    let (shop, mall) = (
        file.for_database(b"shop").unwrap(),
        file.for_database(b"mall").unwrap(),
    );
    assert!(shop.derived && mall.derived);
    assert_eq!(shop.masking().version.number(), 2);
    let default_v1 = Mask::from_hex("2b7e151628aed2a6abf7158809cf4f3c").unwrap();
    for id in [0, 1, 8_388_613_127, MAX] {
        let forms = [
            shop.version(Version::FIRST).unwrap().mask.mask(id).unwrap(),
            mall.version(Version::FIRST).unwrap().mask.mask(id).unwrap(),
            default_v1.mask(id).unwrap(),
        ];
        assert!(forms[0] != forms[1] && forms[0] != forms[2] && forms[1] != forms[2]);
    }
    assert_ne!(shop.summary(), mall.summary());
    let again = KeyFile::parse(FILE.as_bytes())
        .unwrap()
        .for_database(b"shop")
        .unwrap();
    assert_eq!(
        again.summary(),
        shop.summary(),
        "the derivation is deterministic"
    );
    // The derived key has the default's length, and is SP 800-108's first blocks.
    let default = Secret::new(vec![7; 24]);
    let derived = derive(&default, b"shop");
    assert_eq!(derived.bytes().len(), 24);
    assert_ne!(derive(&default, b"shop2").bytes(), derived.bytes());
    assert_ne!(
        derive(&Secret::new(vec![8; 24]), b"shop").bytes(),
        derived.bytes()
    );
    // With no default, a database without lines has no keys.
    let own_only = KeyFile::parse(b"app 1 2b7e151628aed2a6abf7158809cf4f3c").unwrap();
    assert!(own_only.for_database(b"shop").is_none());
    assert!(KeyFile::parse(b"# nothing\n").unwrap().is_empty());
}

/// AES-CMAC, the derivation's and the fingerprint's PRF, is SP 800-38B's: RFC 4493's examples.
#[test]
fn cmac_meets_rfc_4493() {
    let key = Secret::new(parse_hex(KEY_128).unwrap().bytes().to_vec());
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let message = bytes(
        "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51\
         30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710",
    );
    assert_eq!(
        hex(&keys::cmac(&key, b"")),
        "bb1d6929e95937287fa37d129b756746"
    );
    assert_eq!(
        hex(&keys::cmac(&key, &message[..16])),
        "070a16b46b4d4144f79bdd9dd04a287c"
    );
    assert_eq!(
        hex(&keys::cmac(&key, &message)),
        "51f0bebf7e3b9d92fc49741779363cfe"
    );
    // A fingerprint is 16 hexadecimal digits, and differs between keys.
    assert_eq!(fingerprint(&key).len(), 16);
    assert_ne!(fingerprint(&key), fingerprint(&Secret::new(vec![0; 16])));
}

/// A malformed file is refused by line and field, and no error repeats a key.
#[test]
fn a_malformed_key_file_is_refused_without_repeating_a_key() {
    use keys::FileError::*;
    let key = "2b7e151628aed2a6abf7158809cf4f3c";
    let cases: [(String, keys::FileError); 9] = [
        (format!("app 1 {key}\napp 1 {key}"), Duplicate(2, 1)),
        ("app 1\n".to_string(), Fields(1, 2)),
        (format!("app 1 {key} unmask-only extra"), Fields(1, 5)),
        (format!("app 0 {key}"), Version(1)),
        (format!("app 32 {key}"), Version(1)),
        (
            format!("\n\napp 1 {}", &key[1..]),
            Key(3, KeyError::Length(31)),
        ),
        (format!("app 1 {key} unmask_only"), Option(1)),
        (
            format!("app 1 {key} unmask-only"),
            NothingMasks("database \"app\"".into()),
        ),
        (format!("\"app 1 {key}"), Quote(1)),
    ];
    for (text, expected) in cases {
        let error = KeyFile::parse(text.as_bytes()).unwrap_err();
        assert_eq!(error, expected, "{text}");
        assert!(!error.to_string().contains(&key[..8]), "{error}");
    }
    assert_eq!(KeyFile::parse(&[0xff, 0xfe]).unwrap_err(), NotText);
    let large = vec![b'#'; (keys::FILE_MAX_BYTES + 1) as usize];
    assert_eq!(
        KeyFile::parse(&large).unwrap_err(),
        TooLarge(keys::FILE_MAX_BYTES + 1)
    );
}

/// The key file's owner and mode are checked as PostgreSQL checks an `ssl_key_file`.
#[test]
fn the_key_files_permissions_are_postgresqls_for_a_private_key() {
    let server = 105;
    assert_eq!(check_permissions(server, 0o600, server), Ok(()));
    assert_eq!(check_permissions(server, 0o400, server), Ok(()));
    assert_eq!(
        check_permissions(server, 0o640, server),
        Err(PermissionError::GroupOrWorld)
    );
    assert_eq!(
        check_permissions(server, 0o604, server),
        Err(PermissionError::GroupOrWorld)
    );
    assert_eq!(check_permissions(0, 0o640, server), Ok(()));
    assert_eq!(
        check_permissions(0, 0o660, server),
        Err(PermissionError::World)
    );
    assert_eq!(
        check_permissions(0, 0o644, server),
        Err(PermissionError::World)
    );
    assert_eq!(
        check_permissions(1000, 0o600, server),
        Err(PermissionError::Owner)
    );
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
