//! Earlier versions' install scripts, for the tests that start from an earlier version.
//!
//! What users install offers the current version's install script only (snowid is a trusted
//! extension: a database owner's `CREATE EXTENSION snowid VERSION '0.1.0'` would bring back holes
//! fixed since), so the tests that need an earlier version put its script into the extension
//! directory of the PostgreSQL they run against for as long as an [`OldInstallScripts`] lives,
//! and it takes them away again when dropped, after a panic too. Tests of one process share the
//! scripts (the last guard dropped removes them), and [`without_old_install_scripts`] runs a check
//! while none is placed. `scripts/test-major` removes any a killed run left behind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Condvar, Mutex, MutexGuard};

/// How many guards of this process hold the scripts in place; signalled when it drops to zero.
static PLACED: Mutex<usize> = Mutex::new(0);
static NONE_PLACED: Condvar = Condvar::new();

/// The earlier versions' install scripts, in place in the extension directory while it lives.
pub struct OldInstallScripts(());

impl OldInstallScripts {
    /// Puts every earlier version's install script in place (or keeps the ones another test of
    /// this process placed).
    pub fn place() -> OldInstallScripts {
        let mut placed = lock();
        if *placed == 0 {
            for script in scripts() {
                crate::run(as_installer("cp").arg(&script).arg(extension_dir()));
            }
        }
        *placed += 1;
        OldInstallScripts(())
    }
}

impl Drop for OldInstallScripts {
    fn drop(&mut self) {
        let mut placed = lock();
        *placed -= 1;
        if *placed == 0 {
            remove_all();
            NONE_PLACED.notify_all();
        }
    }
}

/// Runs `check` while no earlier version's install script is in the extension directory: after
/// the guards of this process's other tests are dropped, and before any is made again. Fails the
/// test if a script is there all the same (left by a killed run, or put there by hand).
pub fn without_old_install_scripts<T>(check: impl FnOnce() -> T) -> T {
    let mut placed = lock();
    while *placed > 0 {
        placed = NONE_PLACED
            .wait(placed)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    let left: Vec<PathBuf> = versions()
        .iter()
        .map(|v| extension_dir().join(format!("snowid--{v}.sql")))
        .filter(|p| p.exists())
        .collect();
    assert!(
        left.is_empty(),
        "earlier install scripts are in the extension directory: {left:?} (scripts/test-major \
         removes what a killed run left)"
    );
    let result = check();
    drop(placed);
    result
}

/// The versions whose install scripts the tests keep: 0.1.0 to the one before this version.
pub fn versions() -> Vec<String> {
    let mut versions: Vec<String> = scripts()
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            Some(
                name.strip_prefix("snowid--")?
                    .strip_suffix(".sql")?
                    .to_string(),
            )
        })
        .collect();
    versions.sort();
    versions
}

/// The lock on the count, whatever a panicking test left it as.
fn lock() -> MutexGuard<'static, usize> {
    PLACED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `tests/old-installs/snowid--<version>.sql`, every one.
fn scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../old-installs");
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    scripts.sort();
    scripts
}

/// Removes every earlier install script; run from `drop`, where a panic would abort, so a
/// failure is only said (and the next `without_old_install_scripts` fails on what is left).
fn remove_all() {
    for version in versions() {
        let placed = extension_dir().join(format!("snowid--{version}.sql"));
        match as_installer("rm").arg("-f").arg(&placed).status() {
            Ok(status) if status.success() => {}
            other => eprintln!("could not remove {}: {other:?}", placed.display()),
        }
    }
}

/// The extension directory of the PostgreSQL the tests run against.
fn extension_dir() -> PathBuf {
    let out = Command::new(crate::pg_config())
        .arg("--sharedir")
        .output()
        .expect("run pg_config --sharedir");
    assert!(out.status.success(), "pg_config --sharedir failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("extension")
}

/// A program run as the user that installs extensions: root, or through sudo.
fn as_installer(program: &str) -> Command {
    if crate::is_root() {
        Command::new(program)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg(program);
        sudo
    }
}
