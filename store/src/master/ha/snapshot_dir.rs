//! An elected master's own directory of snapshots (`data_dir` in HA mode). The etcd log stays
//! authoritative; the directory only keeps the snapshots this master offered, so that a cluster
//! that lost every master at once, after the log was truncated, still finds the state before
//! the truncation on the disk of the last leader. Same file format and lock as a single
//! master's data directory, which it must not be (it holds no log).
//!
//! ```text
//! <dir>/LOCK                          held (flock) by the running master
//! <dir>/snapshot-<seq>.ysnap          the newest snapshot kept (older ones are deleted)
//! <dir>/snapshot-<seq>.ysnap.discarded  one found beyond etcd's log, set aside at start
//! ```

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::bootstrap::Offered;
use crate::error::{Error, Result};
use crate::master::disk::frame::io_err;
use crate::master::disk::{
    load_newest_snapshot, lock_dir, snapshot_files, sync_dir, write_snapshot_file,
};
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
        let lock = lock_dir(dir)?;
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

    /// The newest readable snapshot, if any. Blocking.
    pub fn newest(&self) -> Result<Option<Snapshot>> {
        load_newest_snapshot(&self.dir)
    }

    /// Writes `offered` durably, then deletes the older snapshots. Blocking.
    pub fn keep(&self, offered: &Offered) -> Result<()> {
        write_snapshot_file(&self.dir, offered.seq, &offered.bytes)?;
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

        let single = tempfile::tempdir().unwrap();
        fs::write(single.path().join("log-00000000000000000001.ylog"), b"").unwrap();
        let e = SnapshotDir::open(single.path()).unwrap_err();
        assert!(e.to_string().contains("operation log"), "{e}");
    }
}
