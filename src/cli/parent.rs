//! A `yuebing` child process (a master or node the demo, a bench or a test started) stops when
//! its parent is gone, however the parent ended, SIGKILL included: otherwise a killed demo
//! leaves its nodes running for ever, holding their memory and ports.
//!
//! [`ChildProcess`](super::child::ChildProcess) gives each child a pipe as stdin, keeps the
//! write end, and sets [`STOP_WITH_PARENT_ENV`] to its own process id. The kernel closes that
//! write end when the parent exits, so the child reads end-of-file: [`parent_gone`] then
//! resolves, and the command stops as on Ctrl-C ([`super::wait_for_signal`] waits for it too);
//! should it not have stopped [`GRACE`] later, the process exits.

use std::io::{Read, Write};
use std::sync::LazyLock;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// In a child's environment: the parent's process id; stop once stdin reaches its end.
pub const STOP_WITH_PARENT_ENV: &str = "YUEBING_STOP_WITH_PARENT";

/// How long a child whose parent is gone has to stop by itself before it exits.
pub const GRACE: Duration = Duration::from_secs(10);

/// Cancelled once this process's parent is gone.
static GONE: LazyLock<CancellationToken> = LazyLock::new(CancellationToken::new);

/// Starts watching stdin if this process is such a child: its environment has
/// [`STOP_WITH_PARENT_ENV`] naming its actual parent (a value inherited from further up, or
/// naming another process, is ignored). Otherwise does nothing.
pub fn stop_with_parent() {
    let parent = std::env::var(STOP_WITH_PARENT_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    if parent != Some(std::os::unix::process::parent_id()) {
        return;
    }
    let watcher = std::thread::Builder::new()
        .name("yuebing-parent".into())
        .spawn(|| {
            if !wait_for_end(std::io::stdin().lock()) {
                return;
            }
            GONE.cancel();
            // Never `eprintln!`: with the parent gone, stderr may be a pipe nobody reads, and
            // a failed write must not stop the stopping.
            let _ = writeln!(
                std::io::stderr(),
                "yuebing: the parent process is gone (stdin closed): stopping"
            );
            std::thread::sleep(GRACE);
            let _ = writeln!(
                std::io::stderr(),
                "yuebing: still running {GRACE:?} after the parent went: exiting"
            );
            std::process::exit(1);
        });
    if let Err(e) = watcher {
        let _ = writeln!(
            std::io::stderr(),
            "yuebing: cannot watch for the parent's end: {e}"
        );
    }
}

/// Resolves once the parent is gone (never in a process that does not watch for it).
pub async fn parent_gone() {
    GONE.cancelled().await
}

/// Reads `input` until its end or a read error (either means nobody holds the other end):
/// true. False for an input that cannot be waited on (non-blocking): then nothing is known.
fn wait_for_end(mut input: impl Read) -> bool {
    let mut sink = [0u8; 256];
    loop {
        match input.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_ends_at_end_of_file_after_reading_what_came_before() {
        let (mut reader, mut writer) = std::io::pipe().unwrap();
        let waiter = std::thread::spawn(move || wait_for_end(&mut reader));
        writer.write_all(b"anything the parent wrote").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "ended while the write end was open");
        drop(writer);
        assert!(waiter.join().unwrap());
    }
}
