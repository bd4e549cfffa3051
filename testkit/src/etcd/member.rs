//! One etcd member process: its command line, its ports and directory, its signals.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::process::{self, Guard};

/// How the members of one cluster find each other.
#[derive(Debug, Clone)]
pub(crate) struct Peers {
    /// The etcd binary.
    pub(crate) binary: PathBuf,
    /// `--initial-cluster`: `m0=http://127.0.0.1:P0,…`.
    pub(crate) initial_cluster: String,
    /// `--initial-cluster-token`, one per cluster.
    pub(crate) token: String,
    /// Fast elections (`--heartbeat-interval 50 --election-timeout 500`) instead of etcd's
    /// defaults (100 / 1000 ms).
    pub(crate) fast: bool,
}

/// One member: a process while it runs.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) client_port: u16,
    pub(crate) peer_port: u16,
    /// Its directory: `data/`, `etcd.log`, `stderr.log`.
    pub(crate) dir: PathBuf,
    child: Option<Guard>,
}

impl Member {
    /// A member that is not started yet.
    pub(crate) fn new(name: String, client_port: u16, peer_port: u16, dir: PathBuf) -> Self {
        Member {
            name,
            client_port,
            peer_port,
            dir,
            child: None,
        }
    }

    /// `127.0.0.1:<client port>`.
    pub(crate) fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    /// `<name>=http://127.0.0.1:<peer port>`, its entry in `--initial-cluster`.
    pub(crate) fn initial_cluster_entry(&self) -> String {
        format!("{}=http://127.0.0.1:{}", self.name, self.peer_port)
    }

    /// Where it logs.
    pub(crate) fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// The process id while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Guard::id)
    }

    /// Starts the process (a new member the first time, its existing data afterwards).
    pub(crate) fn spawn(&mut self, peers: &Peers) -> Result<()> {
        let io = |what: &str, e: io::Error| {
            Error::process(format!("{what} for etcd member {}: {e}", self.name))
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| io("creating its directory", e))?;
        let stderr =
            File::create(self.dir.join("stderr.log")).map_err(|e| io("creating stderr.log", e))?;
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(&peers.binary);
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &peers.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &peers.token])
            .args(["--logger", "zap", "--log-outputs"])
            .arg(self.log_path());
        if peers.fast {
            cmd.args(["--heartbeat-interval", "50", "--election-timeout", "500"]);
        }
        // etcd also reads its flags from ETCD_* variables: none of the caller's apply here.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr));
        let child = process::spawn(cmd).map_err(|e| io("spawning etcd", e))?;
        self.child = Some(child);
        Ok(())
    }

    /// `Some(description)` if the process has exited (it is then reaped).
    pub(crate) fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status.to_string())
            }
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait for it: {e}")),
        }
    }

    /// Whether the process runs.
    pub(crate) fn is_running(&mut self) -> bool {
        self.exited().is_none() && self.child.is_some()
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill(&mut self) {
        if let Some(child) = self.child.take() {
            child.kill();
        }
    }

    /// SIGTERM, then reap; SIGKILL if it has not exited within `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if let Some(child) = self.child.take() {
            child.stop(grace);
        }
    }

    /// Sends `signal` (e.g. SIGSTOP / SIGCONT) to the running process.
    pub(crate) fn signal(&mut self, signal: i32) -> Result<()> {
        let child = (self.child.as_mut())
            .ok_or_else(|| Error::process(format!("etcd member {} is not running", self.name)))?;
        child
            .signal(signal)
            .map_err(|e| Error::process(format!("signalling etcd member {}: {e}", self.name)))
    }

    /// Whether its log says a port was taken (then the start is retried on other ports).
    pub(crate) fn port_was_taken(&self) -> bool {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let stderr = std::fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
        log.contains("address already in use") || stderr.contains("address already in use")
    }

    /// The last lines of its log and stderr, for an error message.
    pub(crate) fn log_tail(&self) -> String {
        let tail = |path: &Path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(8)..].join("\n")
        };
        format!(
            "{} ({}):\n{}\n{}",
            self.name,
            self.log_path().display(),
            tail(&self.log_path()),
            tail(&self.dir.join("stderr.log"))
        )
    }
}
