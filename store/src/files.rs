//! What every file the store keeps shares: a header (an 8-byte magic and a format version),
//! numbered names in a directory, a lock on the directory, and durable renames (the directory
//! synced). The master's data directory and a node's disk tier are both made of these.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Bytes of a file header.
pub(crate) const HEADER_LEN: usize = 12;

/// An i/o error on `path`.
pub(crate) fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Writes a file header: `magic`, then `version` (u32 LE).
pub(crate) fn write_header(w: &mut impl Write, magic: &[u8; 8], version: u32) -> io::Result<()> {
    w.write_all(magic)?;
    w.write_all(&version.to_le_bytes())
}

/// Reads and checks a header written by [`write_header`] with `magic` and `version`;
/// `Ok(false)` when the file is shorter than one.
pub(crate) fn read_header(
    r: &mut impl Read,
    magic: &[u8; 8],
    version: u32,
    path: &str,
) -> Result<bool> {
    let mut buf = [0u8; HEADER_LEN];
    match r.read_exact(&mut buf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => {
            return Err(Error::Io {
                path: path.into(),
                reason: e.to_string(),
            })
        }
    }
    if &buf[..8] != magic {
        return Err(Error::Corrupt {
            path: path.into(),
            reason: "not a yuebing file of this kind (bad magic)".into(),
        });
    }
    let found = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]);
    if found != version {
        return Err(Error::InvalidVersion {
            found,
            supported: version,
        });
    }
    Ok(true)
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, e))
}

/// The files of `dir` named `<prefix><number><suffix>`, by number.
pub(crate) fn numbered(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix(prefix)
            .and_then(|s| s.strip_suffix(suffix))
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((n, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Creates `dir` if needed and locks it (`LOCK`, flock) for this process, which is its
/// `holder` (named in the error when another process holds it).
pub(crate) fn lock_dir(dir: &Path, holder: &str) -> Result<File> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let lock_path = dir.join("LOCK");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io_err(&lock_path, e))?;
    lock.try_lock().map_err(|e| Error::Io {
        path: lock_path.display().to_string(),
        reason: format!("another {holder} holds this directory ({e})"),
    })?;
    Ok(lock)
}
