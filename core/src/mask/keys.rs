//! The mask's keys: the key file, each database's keys, and their fingerprints.
//!
//! The key file holds a line per key: a database (or `*`, the default), the key's version, and
//! the key in hexadecimal, optionally followed by `unmask-only`:
//!
//! ```text
//! # database  version  key
//! *           1        2b7e151628aed2a6abf7158809cf4f3c
//! app         1        8f1d6b2a4c7e9031a5b8d2f4e6c10397
//! app         2        0c9e4a71d3b5f82604ae19c7b3d5e8f2   unmask-only
//! ```
//!
//! - A database with lines of its own uses those keys as they are (so a 0.7.0 key written as a
//!   database's version 1 masks as 0.7.0 did). Every other database uses the default's keys,
//!   each *derived* for it: the key of version `v` for database `name` is SP 800-108's KDF in
//!   counter mode with AES-CMAC (SP 800-38B) as the PRF, keyed by the default's version `v`,
//!   with the label `snowid mask key` and the database's name (UTF-8) as the context. Knowing
//!   one database's key says nothing of another's.
//! - Of a database's versions, the highest that is not `unmask-only` masks; every version
//!   unmasks the text forms that name it. `unmask-only` lets a new key reach every node before
//!   any node masks with it.
//! - A key's fingerprint is the first 8 bytes of AES-CMAC under the key of a fixed message,
//!   in hexadecimal: equal keys have equal fingerprints, and it says nothing usable of the key
//!   (it is not a point FF1 ever computes AES at).
//!
//! Nothing here writes a key anywhere: errors name lines and fields, never their text.

use super::text::Version;
use super::{parse_hex, Mask};
use cmac::{Cmac, KeyInit, Mac};
use std::collections::BTreeMap;
use std::fmt;
use zeroize::Zeroizing;

/// The label of the per-database key derivation.
const DERIVATION_LABEL: &[u8] = b"snowid mask key";
/// The message whose CMAC is a key's fingerprint.
const FINGERPRINT_MESSAGE: &[u8] = b"snowid mask key fingerprint";
/// The key file's size limit: a line per key of a few thousand databases fits many times over.
pub const FILE_MAX_BYTES: u64 = 1 << 20;
/// What the `database` field says for the default.
const DEFAULT_NAME: &str = "*";
/// The option that keeps a version from masking.
const UNMASK_ONLY: &str = "unmask-only";

/// Key material, zeroed when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(bytes))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// One line of the file: a key's version, the key, and whether it masks.
#[derive(Debug, Clone)]
struct Line {
    version: Version,
    key: Secret,
    masks: bool,
}

/// The keys of one database as the file gives them (or of the default), by version.
#[derive(Debug, Clone, Default)]
struct Ring(BTreeMap<Version, Line>);

/// The parsed key file.
#[derive(Debug, Clone, Default)]
pub struct KeyFile {
    default: Option<Ring>,
    /// By the database's name as the file writes it (UTF-8).
    databases: BTreeMap<String, Ring>,
}

/// Why the key file is refused: a line (from 1) and what is wrong with it, or the file as a
/// whole. Never the text of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileError {
    /// Not UTF-8 text.
    NotText,
    /// Larger than [`FILE_MAX_BYTES`].
    TooLarge(u64),
    /// A line with other than 3 or 4 fields; the number it has.
    Fields(usize, usize),
    /// A database name's opening quote is not closed.
    Quote(usize),
    /// The version is not a number from 1 to 31.
    Version(usize),
    /// The key is malformed.
    Key(usize, super::KeyError),
    /// The fourth field is not `unmask-only`.
    Option(usize),
    /// A second line for the same database and version (and the first's line).
    Duplicate(usize, usize),
    /// Every version of a database (or of the default) is `unmask-only`: which.
    NothingMasks(String),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::NotText => write!(f, "the file is not UTF-8 text"),
            FileError::TooLarge(n) => {
                write!(f, "the file has {n} bytes, more than {FILE_MAX_BYTES}")
            }
            FileError::Fields(line, n) => write!(
                f,
                "line {line} has {n} fields; a key's line is: database (or *), version, key, and \
                 optionally unmask-only"
            ),
            FileError::Quote(line) => {
                write!(f, "line {line} opens a quoted name it does not close")
            }
            FileError::Version(line) => write!(
                f,
                "line {line}: the version (the second field) is not a number from 1 to 31"
            ),
            FileError::Key(line, e) => write!(f, "line {line}: {e}"),
            FileError::Option(line) => write!(
                f,
                "line {line}: the fourth field, if any, must be unmask-only"
            ),
            FileError::Duplicate(line, first) => write!(
                f,
                "line {line} gives a key for the same database and version as line {first}"
            ),
            FileError::NothingMasks(name) => write!(
                f,
                "every key of {name} is unmask-only: one version must mask"
            ),
        }
    }
}

impl KeyFile {
    /// Parses the key file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<KeyFile, FileError> {
        if bytes.len() as u64 > FILE_MAX_BYTES {
            return Err(FileError::TooLarge(bytes.len() as u64));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| FileError::NotText)?;
        let mut file = KeyFile::default();
        let mut first_lines: BTreeMap<(Option<String>, Version), usize> = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let number = index + 1;
            let fields = fields(raw, number)?;
            if fields.is_empty() {
                continue;
            }
            if !(3..=4).contains(&fields.len()) {
                return Err(FileError::Fields(number, fields.len()));
            }
            let version = fields[1]
                .text
                .parse::<i64>()
                .ok()
                .and_then(Version::new)
                .filter(|_| !fields[1].quoted)
                .ok_or(FileError::Version(number))?;
            let key = parse_hex(&fields[2].text).map_err(|e| FileError::Key(number, e))?;
            let masks = match fields.get(3) {
                None => true,
                Some(option) if option.text == UNMASK_ONLY && !option.quoted => false,
                Some(_) => return Err(FileError::Option(number)),
            };
            let database = (fields[0].quoted || fields[0].text != DEFAULT_NAME)
                .then(|| fields[0].text.clone());
            if let Some(&first) = first_lines.get(&(database.clone(), version)) {
                return Err(FileError::Duplicate(number, first));
            }
            first_lines.insert((database.clone(), version), number);
            let ring = match database {
                None => file.default.get_or_insert_with(Ring::default),
                Some(name) => file.databases.entry(name).or_default(),
            };
            ring.0.insert(
                version,
                Line {
                    version,
                    key,
                    masks,
                },
            );
        }
        let rings = file
            .default
            .iter()
            .map(|r| ("the default (*)".to_string(), r));
        let rings = rings.chain(
            file.databases
                .iter()
                .map(|(name, r)| (format!("database \"{name}\""), r)),
        );
        for (name, ring) in rings {
            if !ring.0.values().any(|line| line.masks) {
                return Err(FileError::NothingMasks(name));
            }
        }
        Ok(file)
    }

    /// Whether the file holds no key at all.
    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.databases.is_empty()
    }

    /// The keys of the database of this name (its UTF-8 form): its own lines, else the
    /// default's derived for it; `None` when there are neither.
    pub fn for_database(&self, name: &[u8]) -> Option<DatabaseKeys> {
        let own = std::str::from_utf8(name)
            .ok()
            .and_then(|name| self.databases.get(name));
        let (ring, derived) = match (own, &self.default) {
            (Some(ring), _) => (ring, false),
            (None, Some(ring)) => (ring, true),
            (None, None) => return None,
        };
        let versions: Vec<VersionKey> = ring
            .0
            .values()
            .map(|line| {
                let key = if derived {
                    derive(&line.key, name)
                } else {
                    line.key.clone()
                };
                VersionKey {
                    version: line.version,
                    masks: line.masks,
                    fingerprint: fingerprint(&key),
                    mask: Mask::from_bytes(key.bytes()).expect("a key of 16, 24 or 32 bytes"),
                }
            })
            .collect();
        let masking = versions
            .iter()
            .rposition(|v| v.masks)
            .expect("the file was refused if no version masks");
        Some(DatabaseKeys {
            versions,
            masking,
            derived,
        })
    }
}

/// One field of a line, and whether it was quoted.
struct Field {
    text: String,
    quoted: bool,
}

/// The fields of a line: separated by blanks, up to a `#` outside quotes; a field may be quoted
/// with `"` (a name with blanks, `#` or a leading `*`), `""` standing for one `"` in it.
fn fields(line: &str, number: usize) -> Result<Vec<Field>, FileError> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => return Ok(fields),
            Some('"') => {
                chars.next();
                let mut text = String::new();
                loop {
                    match chars.next() {
                        None => return Err(FileError::Quote(number)),
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            text.push('"');
                        }
                        Some('"') => break,
                        Some(c) => text.push(c),
                    }
                }
                fields.push(Field { text, quoted: true });
            }
            Some(_) => {
                let mut text = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || c == '#' {
                        break;
                    }
                    text.push(c);
                    chars.next();
                }
                fields.push(Field {
                    text,
                    quoted: false,
                });
            }
        }
    }
}

/// One version of a database's keys, ready to use.
pub struct VersionKey {
    pub version: Version,
    /// Whether this version masks (else it only unmasks).
    pub masks: bool,
    /// The key's fingerprint: 16 hexadecimal digits.
    pub fingerprint: String,
    pub mask: Mask,
}

/// A database's keys, ready to use: every version, and the one that masks.
pub struct DatabaseKeys {
    /// In ascending order of version.
    pub versions: Vec<VersionKey>,
    masking: usize,
    /// Whether the keys are the default's, derived for the database.
    pub derived: bool,
}

impl DatabaseKeys {
    /// The version that masks.
    pub fn masking(&self) -> &VersionKey {
        &self.versions[self.masking]
    }

    /// The keys of a version, if the database has it.
    pub fn version(&self, version: Version) -> Option<&VersionKey> {
        self.versions.iter().find(|v| v.version == version)
    }

    /// Every version's number and fingerprint, the masking one marked with `*`, such as
    /// `1:0f3a9c2e5b7d1e40 2*:9e1d2c3b4a5f6071`: equal on two servers exactly when they give
    /// every ID the same public forms and read the same ones.
    pub fn summary(&self) -> String {
        self.versions
            .iter()
            .map(|v| {
                let mark = if v.masks && v.version == self.masking().version {
                    "*"
                } else {
                    ""
                };
                format!("{}{mark}:{}", v.version, v.fingerprint)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// AES-CMAC under a key of 16, 24 or 32 bytes.
pub(crate) fn cmac(key: &Secret, message: &[u8]) -> [u8; 16] {
    fn run<C: cmac::block_api::CmacCipher + KeyInit>(key: &[u8], message: &[u8]) -> [u8; 16]
    where
        Cmac<C>: KeyInit + Mac,
    {
        let mut mac =
            <Cmac<C> as KeyInit>::new_from_slice(key).expect("a key of the cipher's size");
        mac.update(message);
        let tag = mac.finalize().into_bytes();
        let mut out = [0; 16];
        out.copy_from_slice(&tag[..16]);
        out
    }
    match key.bytes().len() {
        16 => run::<aes::Aes128>(key.bytes(), message),
        24 => run::<aes::Aes192>(key.bytes(), message),
        _ => run::<aes::Aes256>(key.bytes(), message),
    }
}

/// A database's key from the default's: SP 800-108 KDF in counter mode, AES-CMAC as the PRF,
/// a 32-bit counter before the fixed input `label || 0x00 || name || [L]_32`, as many blocks
/// as the key's length needs, truncated to it. The same length as the default's key.
pub fn derive(default: &Secret, database: &[u8]) -> Secret {
    let length = default.bytes().len();
    let bits = (length as u32 * 8).to_be_bytes();
    let mut key = Vec::with_capacity(32);
    for counter in 1u32..=length.div_ceil(16) as u32 {
        let mut input = Zeroizing::new(Vec::with_capacity(4 + 16 + 1 + database.len() + 4));
        input.extend_from_slice(&counter.to_be_bytes());
        input.extend_from_slice(DERIVATION_LABEL);
        input.push(0);
        input.extend_from_slice(database);
        input.extend_from_slice(&bits);
        key.extend_from_slice(&cmac(default, &input));
    }
    key.truncate(length);
    Secret::new(key)
}

/// A key's fingerprint: 16 hexadecimal digits.
pub fn fingerprint(key: &Secret) -> String {
    cmac(key, FINGERPRINT_MESSAGE)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why the key file's owner and mode are refused, as PostgreSQL refuses an `ssl_key_file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionError {
    /// Owned by neither the server's user nor root.
    Owner,
    /// Owned by the server's user, with group or world permissions.
    GroupOrWorld,
    /// Owned by root, with group write or world permissions.
    World,
}

/// Checks a key file's owner and mode: readable only by the server's user (`u=rw`, 0600, or
/// less), or owned by root and readable by its group too (`u=rw,g=r`, 0640, or less).
pub fn check_permissions(owner: u32, mode: u32, server_user: u32) -> Result<(), PermissionError> {
    match owner {
        o if o == server_user => (mode & 0o077 == 0)
            .then_some(())
            .ok_or(PermissionError::GroupOrWorld),
        0 => (mode & 0o037 == 0)
            .then_some(())
            .ok_or(PermissionError::World),
        _ => Err(PermissionError::Owner),
    }
}
