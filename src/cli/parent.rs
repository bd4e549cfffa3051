//! A `yuebing` child process (a master or node the demo, a bench or a test started) stops when
//! its parent is gone, however the parent ended, SIGKILL included: otherwise a killed demo
//! leaves its nodes running for ever, holding their memory and ports.
//!
//! [`ChildProcess`](super::child::ChildProcess) gives each child a pipe as stdin, keeps the
//! write end, and sets [`STOP_WITH_PARENT_ENV`]. The kernel closes that write end when the
//! parent exits, so the child reads end-of-file: it then asks itself to stop with SIGTERM (a
//! master or node stops as on Ctrl-C) and exits [`GRACE`] later if it has not.

use std::io::Read;
use std::time::Duration;

/// In a child's environment: stop once stdin reaches its end (the parent is gone).
pub const STOP_WITH_PARENT_ENV: &str = "YUEBING_STOP_WITH_PARENT";

/// How long a child whose parent is gone has to stop by itself before it exits.
pub const GRACE: Duration = Duration::from_secs(10);

/// Starts watching stdin if this process is such a child (its environment has
/// [`STOP_WITH_PARENT_ENV`]); otherwise does nothing.
pub fn stop_with_parent() {
    if std::env::var_os(STOP_WITH_PARENT_ENV).is_none() {
        return;
    }
    let watcher = std::thread::Builder::new()
        .name("yuebing-parent".into())
        .spawn(|| {
            wait_for_end(std::io::stdin().lock());
            eprintln!("yuebing: the parent process is gone (stdin closed): stopping");
            // SAFETY: kill(2) with this process's own id and a valid signal number: it touches
            // no memory of ours, and SIGTERM runs the handler the command installed (or ends
            // the process).
            unsafe {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            std::thread::sleep(GRACE);
            eprintln!("yuebing: still running {GRACE:?} after the parent went: exiting");
            std::process::exit(1);
        });
    if let Err(e) = watcher {
        eprintln!("yuebing: cannot watch for the parent's end: {e}");
    }
}

/// Reads `input` until its end or a read error (either means nobody holds the other end).
fn wait_for_end(mut input: impl Read) {
    let mut sink = [0u8; 256];
    loop {
        match input.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
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
        std::io::Write::write_all(&mut writer, b"anything the parent wrote").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "ended while the write end was open");
        drop(writer);
        waiter.join().unwrap();
    }
}
