//! An elected master's own directory of snapshots (`data_dir` in HA mode). The etcd log stays
//! authoritative; the directory only keeps the snapshots this master offered, so that a cluster
//! that lost every master at once, after the log was truncated, still finds the state before
//! the truncation on the disk of the last leader. Same file format and lock as a single
//! master's data directory, which it must not be (it holds no log).
//!
//! ```text
//! <dir>/LOCK                          held (flock) by the running master
//! <dir>/CLUSTER                       which cluster (and incarnation of it) the snapshots are of
//! <dir>/snapshot-<seq>.ysnap          the newest snapshot kept (older ones are deleted)
//! <dir>/snapshot-<seq>.ysnap.discarded  one of another cluster, or beyond etcd's log, set aside
//! ```

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::bootstrap::Offered;
use crate::error::{Error, Result};
use crate::files::{io_err, lock_dir, sync_dir};
use crate::master::disk::{load_newest_snapshot, snapshot_files, write_snapshot_file};
use crate::master::Snapshot;

/// An opened, locked snapshot directory.
#[derive(Debug)]
pub struct SnapshotDir {
    dir: PathBuf,
    _lock: File,
}

impl SnapshotDir {
    /// Opens (creating it if needed) and locks `dir`. A directory holding an operation log (a
    /// single master's) is refused: its snapshots do not come from the etcd log.
    pub fn open(dir: &Path) -> Result<SnapshotDir> {
        let lock = lock_dir(dir, "master")?;
        for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
            let name = entry.map_err(|e| io_err(dir, e))?.file_name();
            if name.to_string_lossy().ends_with(".ylog") {
                return Err(Error::params(format!(
                    "{} holds a single master's operation log; an elected master keeps only \
                     snapshots there: give it a directory of its own",
                    dir.display()
                )));
            }
        }
        Ok(SnapshotDir {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Claims the directory for the cluster `identity`: snapshots of another cluster (or of an
    /// earlier incarnation of this one) are set aside, never applied. Returns how many were.
    /// Blocking.
    pub fn claim(&self, identity: &str) -> Result<usize> {
        let path = self.dir.join("CLUSTER");
        let current = match fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&path, e)),
        };
        if current.as_deref().map(str::trim_end) == Some(identity) {
            return Ok(0);
        }
        let mut set_aside = 0;
        for (seq, _) in snapshot_files(&self.dir)? {
            tracing::warn!(seq, dir = %self.dir.display(), was = current.as_deref().unwrap_or("unknown"),
                now = identity, "a snapshot of another cluster is set aside, not applied");
            self.discard(seq)?;
            set_aside += 1;
        }
        let tmp = self.dir.join("CLUSTER.tmp");
        fs::write(&tmp, format!("{identity}\n")).map_err(|e| io_err(&tmp, e))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err(&tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        sync_dir(&self.dir)?;
        Ok(set_aside)
    }

    /// The newest readable snapshot, if any. Blocking.
    pub fn newest(&self) -> Result<Option<Snapshot>> {
        load_newest_snapshot(&self.dir)
    }

    /// Writes `offered` durably, then deletes the older snapshots. Blocking.
    pub fn keep(&self, offered: &Offered) -> Result<()> {
        write_snapshot_file(&self.dir, offered.seq, |w| w.write_all(&offered.bytes))?;
        for (seq, path) in snapshot_files(&self.dir)? {
            if seq < offered.seq {
                let _ = fs::remove_file(path);
            }
        }
        sync_dir(&self.dir)
    }

    /// Sets the snapshot at `seq` aside (renamed `….discarded`): it is not part of the log this
    /// master now follows. Blocking.
    pub fn discard(&self, seq: u64) -> Result<()> {
        for (n, path) in snapshot_files(&self.dir)? {
            if n == seq {
                let aside = path.with_extension("ysnap.discarded");
                fs::rename(&path, &aside).map_err(|e| io_err(&path, e))?;
            }
        }
        sync_dir(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::{Master, MasterConfig};

    #[test]
    fn keeps_the_newest_sets_one_aside_and_refuses_a_log_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::open(tmp.path()).unwrap();
        assert!(dir.newest().unwrap().is_none());
        assert!(SnapshotDir::open(tmp.path()).is_err(), "locked");
        let snapshot = Master::new(MasterConfig::default(), true).snapshot();
        let offered = Offered::encode(&snapshot).unwrap();
        dir.keep(&offered).unwrap();
        assert_eq!(dir.newest().unwrap(), Some(snapshot));
        // Set aside: no longer loaded, still there for an operator to look at.
        dir.discard(0).unwrap();
        assert!(dir.newest().unwrap().is_none());
        assert!(tmp
            .path()
            .join("snapshot-00000000000000000000.ysnap.discarded")
            .exists());
        drop(dir);

        // Claimed for a cluster, a snapshot stays; claimed for another, it is set aside.
        let offered =
            Offered::encode(&Master::new(MasterConfig::default(), true).snapshot()).unwrap();
        let claims = tempfile::tempdir().unwrap();
        let dir = SnapshotDir::open(claims.path()).unwrap();
        assert_eq!(dir.claim("cluster a").unwrap(), 0);
        dir.keep(&offered).unwrap();
        assert_eq!(dir.claim("cluster a").unwrap(), 0);
        assert!(dir.newest().unwrap().is_some());
        assert_eq!(dir.claim("cluster b").unwrap(), 1);
        assert!(dir.newest().unwrap().is_none());
        drop(dir);

        let single = tempfile::tempdir().unwrap();
        fs::write(single.path().join("log-00000000000000000001.ylog"), b"").unwrap();
        let e = SnapshotDir::open(single.path()).unwrap_err();
        assert!(e.to_string().contains("operation log"), "{e}");
    }
}
