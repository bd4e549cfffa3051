//! Ports on 127.0.0.1 for processes a test starts on a port it chose (an etcd member, a master
//! restarted on its address): random, below 32768, tried with a bind, never handed out twice in
//! one process.
//!
//! Below 32768 lies outside the range the kernel hands to outgoing connections (32768 …), so a
//! client socket of another test cannot hold the port by chance; etcd's defaults (2379, 2380),
//! which a system etcd may hold, are never handed out. Another process may still take a port
//! before the test's process binds it: whoever starts a process on it retries on failure.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// The range ports are drawn from: above the well-known and common service ports, below the
/// kernel's ephemeral range (32768 …), which outgoing connections use.
pub const RANGE: std::ops::Range<u16> = 15000..32768;

/// etcd's default ports, which a system etcd may hold; never handed out.
const ETCD_DEFAULTS: [u16; 2] = [2379, 2380];

/// How many ports are tried before [`pick`] gives up.
const TRIES: usize = 10_000;

/// Every port handed out in this process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `n` distinct ports on 127.0.0.1 that were free a moment ago and were never handed out in
/// this process.
pub fn pick(n: usize) -> Result<Vec<u16>> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut ports = Vec::with_capacity(n);
    let mut tries = 0;
    while ports.len() < n {
        tries += 1;
        if tries > TRIES {
            return Err(Error::NoFreePort {
                range: RANGE,
                tries,
            });
        }
        let port = fastrand::u16(RANGE);
        if ETCD_DEFAULTS.contains(&port) || handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.insert(port);
            ports.push(port);
        }
    }
    Ok(ports)
}

/// One port as [`pick`] chooses them.
///
/// # Panics
/// If no port in [`RANGE`] is free.
pub fn free_port() -> u16 {
    match pick(1) {
        Ok(ports) => ports[0],
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_32768() {
        let a = pick(20).unwrap();
        let b = pick(20).unwrap();
        let c = free_port();
        let all: BTreeSet<u16> = a.iter().chain(&b).chain([&c]).copied().collect();
        assert_eq!(all.len(), 41, "never handed out twice");
        assert!(all.iter().all(|p| RANGE.contains(p)));
        assert!(!all.contains(&2379) && !all.contains(&2380));
    }
}
