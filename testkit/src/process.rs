//! Processes a test starts: killed and reaped when their [`Guard`] is dropped (also when the
//! test panics), killed by the kernel when the test process dies first (`PR_SET_PDEATHSIG`),
//! and signalled deterministically ([`signal`]: a SIGSTOP returns once the process is stopped).
//! [`alone`] runs a test's body in a process of its own.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long [`signal`] waits for a SIGSTOP'd process to stop.
const STOPPED_WITHIN: Duration = Duration::from_secs(10);

/// A child process, killed (SIGKILL) and reaped when this is dropped. Start one with [`spawn`].
#[derive(Debug)]
pub struct Guard {
    /// `None` only once [`Guard::wait_with_output`] took it.
    child: Option<Child>,
}

impl Guard {
    fn child(&self) -> &Child {
        self.child
            .as_ref()
            .unwrap_or_else(|| unreachable!("only wait_with_output takes the child"))
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .unwrap_or_else(|| unreachable!("only wait_with_output takes the child"))
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child().id()
    }

    /// Its exit status if it has exited (it is then reaped), `None` while it runs.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.child_mut().try_wait()
    }

    /// Sends `sig` (`libc::SIGSTOP`, `libc::SIGCONT`, …), as [`signal`] does, unless the
    /// process has exited (then `ESRCH`): once reaped, its pid may be another process's.
    pub fn signal(&mut self, sig: i32) -> io::Result<()> {
        if self.try_wait()?.is_some() {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // Not reaped (try_wait said it runs): the pid is still this child's.
        signal(self.id(), sig)
    }

    /// SIGKILL, then reap (what dropping it does).
    pub fn kill(self) {}

    /// SIGTERM, then reap; SIGKILL if it has not exited within `grace`.
    pub fn stop(mut self, grace: Duration) {
        if self.signal(libc::SIGTERM).is_err() {
            return;
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for it to exit and collects what it wrote to its stdout and stderr (when they were
    /// piped).
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        let child = self
            .child
            .take()
            .unwrap_or_else(|| unreachable!("taken once"));
        child.wait_with_output()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A spawn request for the spawner thread.
type Job = (Command, mpsc::Sender<io::Result<Child>>);

/// Starts `cmd` with `PR_SET_PDEATHSIG(SIGKILL)`, so that the child dies with the test
/// process. The parent-death signal fires when the thread that forked exits, not the process:
/// children are therefore forked by one thread that lives as long as the process.
pub fn spawn(cmd: Command) -> io::Result<Guard> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let gone = || io::Error::other("the test kit's spawner thread is gone");
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, inbox) = mpsc::channel::<Job>();
        // If the thread cannot start, `inbox` goes with it, and every spawn fails with `gone`.
        let _ = std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in inbox {
                    let _ = reply.send(spawn_with_parent_death(&mut cmd));
                }
            });
        Mutex::new(jobs)
    });
    let (reply, answer) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| gone())?;
    let child = answer.recv().map_err(|_| gone())??;
    Ok(Guard { child: Some(child) })
}

/// Spawns `cmd` on the calling thread, the child asking for SIGKILL when that thread exits.
fn spawn_with_parent_death(cmd: &mut Command) -> io::Result<Child> {
    let parent = i32::try_from(std::process::id()).map_err(io::Error::other)?;
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // work is allowed. It makes two system calls (prctl PR_SET_PDEATHSIG, getppid), which
    // neither allocate nor take locks, and builds its errors from a raw errno (no allocation).
    // It touches no state shared with other threads.
    unsafe {
        cmd.pre_exec(move || {
            let sigkill = libc::SIGKILL as libc::c_ulong;
            if libc::prctl(libc::PR_SET_PDEATHSIG, sigkill, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
    cmd.spawn()
}

/// Sends `sig` to `pid`, a child of this process that has not been reaped. After SIGSTOP it
/// returns only once every thread of the process is stopped: kill(2) returns before the signal
/// took effect, and a test that stops a peer must not race a request past it.
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let raw = i32::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(raw, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if sig != libc::SIGSTOP {
        return Ok(());
    }
    let until = Instant::now() + STOPPED_WITHIN;
    while !all_threads_stopped(pid) {
        if Instant::now() >= until {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("process {pid} did not stop within {STOPPED_WITHIN:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Whether every thread of `pid` is in state `T` (stopped), from `/proc/PID/task/*/stat`.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            // The state is the first field after the parenthesised command name.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

/// The variable that tells a test binary started by [`alone`] which test it runs alone.
const ALONE_ENV: &str = "YUEBING_TESTKIT_ALONE";

/// Runs `body` in a process of its own, for a test that measures its process (resident
/// memory, say), which other tests running in threads of the same binary would disturb.
///
/// `name` is the test's path in its binary (`module::test_fn`). Called from that test, it
/// starts this test binary again with only that test (a child killed with this process) and
/// returns once it passed there, printing its output; in that child it runs `body`.
///
/// # Panics
/// If the test failed in the child (with the child's output), or the child did not run exactly
/// that one test (`name` is not the test's path).
pub fn alone(name: &str, body: impl FnOnce()) {
    if std::env::var_os(ALONE_ENV).is_some_and(|v| v == name) {
        body();
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("no test binary: {e}"));
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ALONE_ENV, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = spawn(cmd)
        .and_then(Guard::wait_with_output)
        .unwrap_or_else(|e| panic!("cannot run {name} alone: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        output.status.success(),
        "{name}, run alone, failed ({})",
        output.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run alone: is it the test's path in its binary?"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper() -> Guard {
        let mut cmd = Command::new("sleep");
        cmd.arg("60").stdout(Stdio::null());
        spawn(cmd).unwrap()
    }

    #[test]
    fn a_dropped_guard_kills_and_reaps_its_child() {
        let child = sleeper();
        let pid = child.id();
        drop(child);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_stopped_child_is_stopped_when_signal_returns_and_goes_on_after_sigcont() {
        let mut child = sleeper();
        child.signal(libc::SIGSTOP).unwrap();
        assert!(all_threads_stopped(child.id()));
        child.signal(libc::SIGCONT).unwrap();
        assert!(child.try_wait().unwrap().is_none(), "still running");
        child.stop(Duration::from_secs(10));
    }

    /// Whether `pid` is gone or a zombie (its parent died, and nobody reaped it yet).
    fn dead(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
    }

    #[test]
    fn a_child_dies_with_the_test_process() {
        const NAME: &str = "process::tests::a_child_dies_with_the_test_process";
        if std::env::var_os(ALONE_ENV).is_some_and(|v| v == NAME) {
            // The test process that started `sleep` ends without dropping its guard.
            let child = sleeper();
            println!("pid {}", child.id());
            std::mem::forget(child);
            std::process::exit(0);
        }
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([NAME, "--exact", "--nocapture"])
            .env(ALONE_ENV, NAME)
            .stdout(Stdio::piped());
        let out = spawn(cmd).unwrap().wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let pid: u32 = (text.lines().find_map(|l| l.strip_prefix("pid ")))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {text:?}"));
        let until = Instant::now() + Duration::from_secs(10);
        while !dead(pid) {
            assert!(Instant::now() < until, "sleep {pid} outlived its parent");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_body_runs_in_a_process_of_its_own() {
        alone(
            "process::tests::a_body_runs_in_a_process_of_its_own",
            || {
                assert_eq!(
                    std::env::var(ALONE_ENV).unwrap(),
                    "process::tests::a_body_runs_in_a_process_of_its_own"
                );
            },
        );
    }

    #[test]
    #[should_panic(expected = "did not run alone")]
    fn a_wrong_name_is_noticed() {
        alone("process::tests::no_such_test", || {});
    }
}
