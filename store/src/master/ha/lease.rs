//! When an elected leader may still act. etcd expires the leader's lease `ttl` after it
//! received the last keep-alive; the leader cannot know when that was, only when it *sent*
//! it, which is earlier. Counting `ttl` from the send time, minus a margin for the two clocks
//! ticking at different rates, the leader stops serving before etcd could have expired the
//! lease and let another master win, so two leaders never serve at once.
//!
//! The margin assumes clock rates differ by at most [`MAX_DRIFT_PPM`] (1 %, far above what
//! NTP-disciplined or even free-running hardware clocks show) plus [`SLACK`] for the time
//! between a check and the action it allows. A new leader waits the same margin after it won
//! (etcd has expired the old lease by then) before it serves: not a whole extra TTL.

use std::time::{Duration, Instant};

/// The largest clock-rate difference between a master and etcd assumed, in parts per million.
pub const MAX_DRIFT_PPM: u64 = 10_000;
/// Time allowed between checking the lease and acting on the check.
pub const SLACK: Duration = Duration::from_millis(50);

/// A leader's view of its etcd lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderLease {
    ttl: Duration,
    /// Until when it may act (`None`: not at all, before the first keep-alive or once lost).
    until: Option<Instant>,
}

impl LeaderLease {
    /// The lease of an etcd lease with `ttl` (as etcd granted it, which may exceed the TTL
    /// asked for), not yet confirmed.
    pub fn new(ttl: Duration) -> LeaderLease {
        LeaderLease { ttl, until: None }
    }

    /// The margin taken off every deadline: the drift over one TTL, plus [`SLACK`].
    pub fn margin(&self) -> Duration {
        let drift = self
            .ttl
            .as_micros()
            .saturating_mul(u128::from(MAX_DRIFT_PPM))
            / 1_000_000;
        Duration::from_micros(u64::try_from(drift).unwrap_or(u64::MAX)) + SLACK
    }

    /// A keep-alive (or the grant) sent at `sent` was answered: the lease runs until
    /// `sent + ttl - margin` unless it already ran later.
    pub fn renewed(&mut self, sent: Instant) {
        let end = sent + self.ttl.saturating_sub(self.margin());
        self.until = Some(self.until.map_or(end, |u| u.max(end)));
    }

    /// The lease is gone (revoked, or etcd said it expired): stop at once.
    pub fn lost(&mut self) {
        self.until = None;
    }

    /// Whether the leader may serve at `now`.
    pub fn may_serve(&self, now: Instant) -> bool {
        self.until.is_some_and(|u| now < u)
    }

    /// Until when it may serve, if at all.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_counts_from_the_send_time_minus_the_margin() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(2);
        let mut l = LeaderLease::new(ttl);
        assert!(!l.may_serve(t0), "not before the first answer");
        assert_eq!(l.margin(), Duration::from_millis(20) + SLACK);
        l.renewed(t0);
        let end = t0 + ttl - l.margin();
        assert!(l.may_serve(end - Duration::from_millis(1)));
        assert!(!l.may_serve(end));
        // A late answer to an older keep-alive never shortens the lease.
        l.renewed(t0 + Duration::from_secs(1));
        l.renewed(t0);
        assert_eq!(l.until(), Some(end + Duration::from_secs(1)));
        l.lost();
        assert!(!l.may_serve(t0));
    }

    #[test]
    fn the_leader_stops_before_etcd_can_expire_its_lease() {
        // The leader serves `ttl - margin` after sending the keep-alive, by its clock. If that
        // clock runs slow by the drift bound, etcd's clock sees longer; etcd expires the lease
        // `ttl` after *receiving* the keep-alive, which is no earlier than its sending. The
        // last action allowed (within SLACK of a check) still comes before the expiry.
        for secs in [2, 3, 10, 60] {
            let ttl = Duration::from_secs(secs);
            let serve = ttl - LeaderLease::new(ttl).margin();
            let in_etcd_time = serve + serve * MAX_DRIFT_PPM as u32 / 1_000_000;
            assert!(in_etcd_time + SLACK <= ttl, "ttl {ttl:?}: {in_etcd_time:?}");
        }
    }
}
