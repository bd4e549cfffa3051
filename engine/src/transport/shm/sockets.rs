//! Where the shm side channels' sockets live, and the sweep of those left behind.
//!
//! Each engine binds `shm-<pid>-<instance>.sock` in a per-user directory (mode 0700) and removes
//! it when dropped. A process killed with SIGKILL cannot: its socket stays behind, and on a node
//! restarted that way again and again they pile up. So a starting engine removes every socket
//! whose process is gone and that refuses connections. Both are checked: a process in another
//! pid namespace sharing the directory looks gone by its pid, but its socket still accepts
//! (and a live engine's socket is only ever connected to when its pid looks gone).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::process::{test_kill_process, Pid};

/// The per-user directory of side-channel sockets (`$XDG_RUNTIME_DIR`, else the temp dir).
pub(super) fn socket_dir() -> std::io::Result<PathBuf> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("yuebing-{}", rustix::process::getuid().as_raw()));
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// The socket of this process's engine of instance `instance` in `dir`.
pub(super) fn socket_path(dir: &Path, instance: u64) -> PathBuf {
    dir.join(format!("shm-{}-{instance:016x}.sock", std::process::id()))
}

/// The process that bound a socket named by [`socket_path`].
fn owner(name: &str) -> Option<Pid> {
    let rest = name.strip_prefix("shm-")?.strip_suffix(".sock")?;
    let (pid, _instance) = rest.split_once('-')?;
    Pid::from_raw(pid.parse().ok()?)
}

/// Whether nothing listens on the socket at `path` any more.
fn refused(path: &Path) -> bool {
    matches!(
        std::os::unix::net::UnixStream::connect(path),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// Removes the sockets in `dir` whose process no longer exists; returns how many.
pub(super) fn sweep_stale(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else {
            continue;
        };
        let gone = matches!(test_kill_process(pid), Err(e) if e == rustix::io::Errno::SRCH)
            && refused(&entry.path());
        if gone && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::debug!(removed, dir = %dir.display(), "removed shm sockets of exited processes");
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sockets_of_exited_processes_are_removed() {
        let dir = std::env::temp_dir().join(format!("yuebing-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A child that has exited and been reaped: its pid names no process (until reused).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir.join(format!("shm-{dead}-00000000000000aa.sock"));
        let live = socket_path(&dir, 0xbb);
        let other = dir.join("notes.txt");
        for f in [&stale, &live, &other] {
            std::fs::write(f, b"").unwrap();
        }
        // Named after the dead pid but still accepting (as from another pid namespace).
        let accepting = dir.join(format!("shm-{dead}-00000000000000cc.sock"));
        let _listener = std::os::unix::net::UnixListener::bind(&accepting).unwrap();
        assert_eq!(sweep_stale(&dir), 1);
        assert!(!stale.exists(), "the stale socket stayed");
        assert!(live.exists() && other.exists() && accepting.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_of_other_shapes_have_no_owner() {
        assert_eq!(owner("shm-00000000000000aa.sock"), None);
        assert_eq!(owner("shm-x-1.sock"), None);
        assert_eq!(owner("shm-0-1.sock"), None);
        assert!(owner("shm-42-1.sock").is_some());
    }
}
