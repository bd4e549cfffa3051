//! One etcd member process: its command line, its ports and directory, its signals.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::error::{Error, Result};

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
    child: Option<Child>,
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
        self.child.as_ref().map(Child::id)
    }

    /// Starts the process (a new member the first time, its existing data afterwards).
    pub(crate) fn spawn(&mut self, peers: &Peers) -> Result<()> {
        let io = |what: &str, e: io::Error| Error::Process {
            reason: format!("{what} for etcd member {}: {e}", self.name),
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
        let child = spawn_tied_to_process(cmd).map_err(|e| io("spawning etcd", e))?;
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then reap; SIGKILL if it has not exited within `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = rustix::process::kill_process(Pid::from_child(&child), Signal::TERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Sends `signal` (e.g. SIGSTOP / SIGCONT) to the running process.
    pub(crate) fn signal(&self, signal: Signal) -> Result<()> {
        let child = self.child.as_ref().ok_or_else(|| Error::Process {
            reason: format!("etcd member {} is not running", self.name),
        })?;
        rustix::process::kill_process(Pid::from_child(child), signal).map_err(|e| Error::Process {
            reason: format!("signalling etcd member {}: {e}", self.name),
        })
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

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A spawn request for the spawner thread.
type Job = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` with `PR_SET_PDEATHSIG(SIGKILL)`, so that the child dies with the test
/// process. The parent-death signal fires when the thread that forked exits, not the process:
/// children are therefore forked by one thread that lives as long as the process.
fn spawn_tied_to_process(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("etcd-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in inbox {
                    let _ = reply.send(spawn_with_parent_death(&mut cmd));
                }
            });
        if let Err(e) = thread {
            tracing::error!(error = %e, "no etcd spawner thread");
        }
        Mutex::new(jobs)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| io::Error::other("the etcd spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the etcd spawner thread is gone"))?
}

/// Spawns `cmd` on the calling thread, the child asking for SIGKILL when that thread exits.
fn spawn_with_parent_death(cmd: &mut Command) -> io::Result<Child> {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // work is allowed. It makes two system calls through rustix's raw syscall layer (prctl
    // PR_SET_PDEATHSIG, getppid), which neither allocate nor take locks, and builds its error
    // from a raw errno (no allocation). It touches no state shared with other threads.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died between fork and prctl: then nobody would kill us.
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::from(rustix::io::Errno::SRCH));
            }
            Ok(())
        })
    };
    cmd.spawn()
}
