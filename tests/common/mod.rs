//! What the root package's integration tests share: real `yuebing` processes, started on
//! 127.0.0.1, read until ready, and killed and reaped when dropped (also when a test panics);
//! settings that reach the test kit's etcd; test access to an engine buffer's bytes. Waiting,
//! ports, byte patterns and signals are the test kit's (`yuebing_testkit`).

#![allow(dead_code)]

use std::path::Path;

use yuebing::cli::child::ChildProcess;
use yuebing::engine::EngineBuffer;
use yuebing::rpc::{Endpoint, Token};

/// A `yuebing` child process that printed `<prefix><value>` as its first line.
pub(crate) struct Process {
    child: ChildProcess,
}

impl Process {
    /// Runs `yuebing ARGS` (the binary cargo built for the tests) and waits for its first
    /// line, which must start with `prefix`.
    pub(crate) fn start(args: &[&str], prefix: &str) -> Process {
        Process::start_with(args, prefix, None)
    }

    /// Like [`Process::start`], with the cluster token in the child's environment.
    pub(crate) fn start_with(args: &[&str], prefix: &str, token: Option<&Token>) -> Process {
        let exe = Path::new(env!("CARGO_BIN_EXE_yuebing"));
        let child = ChildProcess::spawn(exe, args, prefix, token).unwrap_or_else(|e| panic!("{e}"));
        Process { child }
    }

    /// What followed the ready prefix (an address or a segment name).
    pub(crate) fn ready(&self) -> &str {
        &self.child.announced
    }

    /// A master: `yuebing master --port PORT ARGS`.
    pub(crate) fn master(port: u16, extra: &[&str]) -> Process {
        let port = port.to_string();
        // No admin server (tests/master_admin.rs asks for its own on a free port).
        let mut args = vec![
            "master",
            "--bind",
            "127.0.0.1",
            "--port",
            &port,
            "--metrics-port",
            "off",
        ];
        args.extend_from_slice(extra);
        Process::start(&args, "yuebing master ready on ")
    }

    /// A node with `size` of store space, tcp forced, pinging every 100 ms (short TTLs in tests).
    pub(crate) fn node(master: &Endpoint, size: &str) -> Process {
        let m = master.to_string();
        let args = [
            "node",
            "--master",
            &m,
            "--store-size",
            size,
            "--transport",
            "tcp",
            "--heartbeat-ms",
            "100",
        ];
        Process::start(&args, "yuebing node ready ")
    }

    /// The address it printed.
    pub(crate) fn endpoint(&self) -> Endpoint {
        self.ready().parse().expect("an address")
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`libc::SIGSTOP`, …; see [`yuebing_testkit::process::signal`]: after
    /// SIGSTOP it returns once the process is stopped).
    pub(crate) fn signal(&self, sig: i32) {
        yuebing_testkit::process::signal(self.child.id(), sig)
            .unwrap_or_else(|e| panic!("signal {sig} to {}: {e}", self.child.id()));
    }

    /// SIGKILL and reap (also done when dropped).
    pub(crate) fn kill(&mut self) {
        self.child.kill();
    }
}

/// Settings that reach `etcd`, with a short connect timeout for tests (1 s).
#[cfg(feature = "etcd")]
pub(crate) fn etcd_config(etcd: &yuebing_testkit::etcd::EtcdServer) -> yuebing::etcd::EtcdConfig {
    let mut config = yuebing::etcd::EtcdConfig::new(&etcd.endpoint())
        .unwrap_or_else(|e| unreachable!("the launcher's own endpoint parses: {e}"));
    config.connect_timeout = std::time::Duration::from_secs(1);
    config
}

/// Test access to an engine buffer's bytes. Each test touches a buffer's bytes only while no
/// transfer on them is in flight and no peer is given them to write, which is what
/// [`EngineBuffer::write_at`]'s contract asks.
pub(crate) trait TestBytes {
    /// Copies `data` in at `offset`.
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), yuebing::engine::Error>;
    /// Copies `out.len()` bytes at `offset` out.
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<(), yuebing::engine::Error>;
}

impl TestBytes for EngineBuffer {
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), yuebing::engine::Error> {
        // SAFETY (test): see the trait's docs.
        unsafe { self.write_at(offset, data) }
    }
    fn get(&self, offset: usize, out: &mut [u8]) -> Result<(), yuebing::engine::Error> {
        // SAFETY (test): see the trait's docs.
        unsafe { self.read_at(offset, out) }
    }
}
