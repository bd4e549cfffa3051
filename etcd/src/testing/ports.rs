//! Ports for etcd members: random, below 32768, tried with a bind, never handed out twice.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// The range ports are drawn from: above the well-known and common service ports, below the
/// kernel's ephemeral range (32768 …), which outgoing connections use.
const RANGE: std::ops::Range<u16> = 15000..32768;

/// etcd's default ports, which a system etcd may hold; never handed out.
const ETCD_DEFAULTS: [u16; 2] = [2379, 2380];

/// Every port handed out in this process.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `n` distinct ports on 127.0.0.1 that were free a moment ago and were never handed out in
/// this process. Another process may still take one before etcd binds it: callers retry.
pub(crate) fn pick(n: usize) -> Result<Vec<u16>> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut ports = Vec::with_capacity(n);
    let mut tries = 0;
    while ports.len() < n {
        tries += 1;
        if tries > 10_000 {
            return Err(Error::Process {
                reason: format!("no free port in {RANGE:?} after {tries} tries"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_32768() {
        let a = pick(20).unwrap();
        let b = pick(20).unwrap();
        let all: BTreeSet<u16> = a.iter().chain(&b).copied().collect();
        assert_eq!(all.len(), 40, "never handed out twice");
        assert!(all.iter().all(|p| RANGE.contains(p)));
        assert!(!all.contains(&2379) && !all.contains(&2380));
    }
}
