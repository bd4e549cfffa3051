//! `yuebing` child processes started by the demo, `bench store` and the integration tests (a
//! master, nodes): each is started, waited for until it announces itself, and killed and reaped
//! when dropped; should the parent end without dropping it (SIGKILL), the child stops by itself
//! ([`super::parent`]).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use yuebing_rpc::{Endpoint, Token};

use super::cluster::{TOKEN_ENV, TOKEN_FILE_ENV};
use super::parent::STOP_WITH_PARENT_ENV;

/// A running child process and what it announced.
pub struct ChildProcess {
    child: Child,
    /// The write end of the child's stdin, held while this lives: the kernel closes it when
    /// this process ends, and the child then stops (see [`super::parent`]).
    _stdin: Option<ChildStdin>,
    /// The read end of its stdout, held open after the ready line: what it prints next (a
    /// master's admin address) lands in the pipe instead of failing with a broken pipe.
    stdout: BufReader<ChildStdout>,
    /// The rest of its ready line: a node's segment name, a master's address.
    pub announced: String,
}

impl ChildProcess {
    /// Starts `yuebing ARGS…` and waits for its first line, which must start with `ready`. The
    /// wait runs on the blocking pool: a node mounts its space at a master that may be served
    /// by this very runtime, which must stay free to answer it.
    /// With a `token`, the child gets it in its environment (`YUEBING_TOKEN`: not on its
    /// command line, where `ps` would show it).
    pub async fn start(
        args: Vec<String>,
        ready: &'static str,
        token: Option<&Token>,
    ) -> Result<ChildProcess, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let what = format!("{args:?}");
        let token = token.cloned();
        tokio::task::spawn_blocking(move || ChildProcess::spawn(&exe, &args, ready, token.as_ref()))
            .await
            .map_err(|e| format!("cannot start {what}: {e}"))?
    }

    /// `yuebing node` with `size` of store space for `master`.
    pub async fn node(
        master: &Endpoint,
        size: &str,
        transport: Option<&str>,
        token: Option<&Token>,
    ) -> Result<ChildProcess, String> {
        Self::node_of(std::slice::from_ref(master), size, transport, token).await
    }

    /// `yuebing node` with `size` of store space for the cluster of `masters` (tried in order,
    /// as a node fails over between them).
    pub async fn node_of(
        masters: &[Endpoint],
        size: &str,
        transport: Option<&str>,
        token: Option<&Token>,
    ) -> Result<ChildProcess, String> {
        Self::node_with(masters, size, transport, &[], token).await
    }

    /// [`ChildProcess::node_of`] with `extra` flags (`--metrics-port 0`: an admin server, and
    /// metrics).
    pub async fn node_with(
        masters: &[Endpoint],
        size: &str,
        transport: Option<&str>,
        extra: &[&str],
        token: Option<&Token>,
    ) -> Result<ChildProcess, String> {
        let mut args: Vec<String> = ["node", "--master", &joined(masters), "--store-size", size]
            .map(String::from)
            .into();
        if let Some(t) = transport {
            args.extend(["--transport".to_string(), t.to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        ChildProcess::start(args, "yuebing node ready ", token).await
    }

    /// `yuebing master` on an ephemeral port of 127.0.0.1, with `extra` flags (without an
    /// admin server, and so without metrics, unless they give a `--metrics-port`); its address.
    pub async fn master(
        extra: &[&str],
        token: Option<&Token>,
    ) -> Result<(ChildProcess, Endpoint), String> {
        let mut args: Vec<String> = ["master", "--port", "0"].map(String::from).into();
        if !extra.contains(&"--metrics-port") {
            args.extend(["--metrics-port".to_string(), "off".to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = ChildProcess::start(args, "yuebing master ready on ", token).await?;
        let addr = child
            .announced
            .parse()
            .map_err(|e| format!("master announced {:?}: {e}", child.announced))?;
        Ok((child, addr))
    }

    /// Starts `exe ARGS…` and waits (blocking) for its first line, which must start with
    /// `ready`; the rest of that line is [`announced`](Self::announced). Tests pass the binary
    /// cargo built for them, everything else [`start`](Self::start)s this executable.
    pub fn spawn<S: AsRef<OsStr>>(
        exe: &Path,
        args: &[S],
        ready: &str,
        token: Option<&Token>,
    ) -> Result<ChildProcess, String> {
        let mut cmd = Command::new(exe);
        cmd.args(args).stderr(Stdio::inherit());
        pass_token(&mut cmd, token);
        ChildProcess::spawn_command(cmd, ready)
    }

    /// Starts `cmd` (its stdin and stdout are taken over, and it stops when this process ends;
    /// the rest is the caller's: environment, stderr) and waits for its ready line, as
    /// [`ChildProcess::spawn`].
    pub fn spawn_command(mut cmd: Command, ready: &str) -> Result<ChildProcess, String> {
        // Not `{cmd:?}`: a command's Debug shows the environment it sets, the token included.
        let shown = shown(&cmd);
        let mut child = cmd
            .env(STOP_WITH_PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {shown}: {e}"))?;
        // From here on dropping `proc` kills the child, on every early return too.
        let stdout = child.stdout.take();
        let stdin = child.stdin.take();
        let mut proc = ChildProcess {
            child,
            _stdin: stdin,
            stdout: BufReader::new(stdout.ok_or("child without stdout")?),
            announced: String::new(),
        };
        let mut line = String::new();
        proc.stdout
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        proc.announced = line
            .trim()
            .strip_prefix(ready.trim_end())
            .map(str::trim)
            .ok_or_else(|| format!("{shown} did not start: {line:?}"))?
            .to_string();
        Ok(proc)
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Addresses as a `--master` list: `h:p,h:p`.
pub fn joined(endpoints: &[Endpoint]) -> String {
    endpoints
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A command's program and arguments, for messages (never its environment).
fn shown(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Hands `token` to a child process in its environment, and nothing else of the parent's
/// token settings (an inherited token file would clash with it).
pub fn pass_token(cmd: &mut Command, token: Option<&Token>) {
    use std::os::unix::ffi::OsStrExt;
    cmd.env_remove(TOKEN_FILE_ENV);
    match token {
        Some(t) => cmd.env(TOKEN_ENV, OsStr::from_bytes(t.as_bytes())),
        None => cmd.env_remove(TOKEN_ENV),
    };
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_fails_to_start_is_reported_without_its_token() {
        let token = Token::new("child-secret-42").unwrap();
        let err = ChildProcess::spawn(Path::new("/bin/true"), &["--flag"], "ready", Some(&token))
            .err()
            .expect("/bin/true prints no ready line");
        assert!(err.contains("/bin/true --flag"), "{err}");
        assert!(!err.contains("child-secret-42"), "{err}");
    }
}
