//! [`LeaseState`]: what a candidate or leader knows of its election lease, without I/O.
//!
//! The keep-alive task feeds it: [`LeaseState::handle_answer`] for every keep-alive etcd
//! answered with a TTL (with the time the keep-alive was *sent*), [`LeaseState::handle_gone`]
//! when etcd says the lease is gone or the task gives up. [`LeaseState::poll_deadline`] says
//! until when the lease holds, so the task can sleep until then and declare the lease lost if
//! nothing renewed it meanwhile. Once lost, it stays lost: an election lease is never
//! replaced, its holder steps down and campaigns again from scratch.

use std::time::{Duration, Instant};

use yuebing_store::master::ha::LeaderLease;

/// The state of one election lease (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct LeaseState {
    lease: LeaderLease,
    /// The latest deadline reached; kept once the lease is lost, as the last instant at which
    /// it could have served.
    deadline: Option<Instant>,
    /// Why the lease is lost, once it is.
    lost: Option<String>,
}

impl LeaseState {
    /// A lease etcd granted with `ttl`, the grant sent at `sent`.
    pub(crate) fn granted(ttl: Duration, sent: Instant) -> LeaseState {
        let mut lease = LeaderLease::new(ttl);
        lease.renewed(sent);
        LeaseState {
            deadline: lease.until(),
            lease,
            lost: None,
        }
    }

    /// etcd answered a keep-alive sent at `sent` with a positive TTL, at `now`. An answer that
    /// comes after the deadline passed does not bring the lease back: it is lost.
    pub(crate) fn handle_answer(&mut self, sent: Instant, now: Instant) {
        if self.lost.is_some() {
            return;
        }
        if !self.lease.may_serve(now) {
            self.handle_gone("the deadline passed before a keep-alive was answered".into());
            return;
        }
        self.lease.renewed(sent);
        self.deadline = self.lease.until().max(self.deadline);
    }

    /// The lease is gone (etcd said so, or its deadline passed): lost for good. The first
    /// reason is kept.
    pub(crate) fn handle_gone(&mut self, reason: String) {
        self.lease.lost();
        if self.lost.is_none() {
            self.lost = Some(reason);
        }
    }

    /// Until when the lease holds if nothing renews it; `None` once lost. At or after that
    /// instant, the owner calls [`LeaseState::handle_gone`].
    pub(crate) fn poll_deadline(&self) -> Option<Instant> {
        self.lease.until()
    }

    /// Whether the lease holds at `now`.
    pub(crate) fn may_serve(&self, now: Instant) -> bool {
        self.lease.may_serve(now)
    }

    /// The latest deadline the lease reached (also after it was lost).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Why it was lost, if it was.
    pub(crate) fn lost(&self) -> Option<&str> {
        self.lost.as_deref()
    }

    /// A copy of the leader's lease.
    pub(crate) fn lease(&self) -> &LeaderLease {
        &self.lease
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(2);

    #[test]
    fn answers_extend_the_deadline_from_their_send_time() {
        let t0 = Instant::now();
        let mut s = LeaseState::granted(TTL, t0);
        let margin = s.lease().margin();
        assert_eq!(s.poll_deadline(), Some(t0 + TTL - margin));
        assert!(s.may_serve(t0));
        let sent = t0 + Duration::from_millis(700);
        s.handle_answer(sent, sent + Duration::from_millis(900));
        assert_eq!(s.poll_deadline(), Some(sent + TTL - margin));
        assert_eq!(s.deadline(), s.poll_deadline());
        // An older answer arriving late does not shorten it.
        s.handle_answer(t0, sent + Duration::from_millis(950));
        assert_eq!(s.poll_deadline(), Some(sent + TTL - margin));
        assert!(s.lost().is_none());
    }

    #[test]
    fn a_late_answer_does_not_revive_a_lease_past_its_deadline() {
        let t0 = Instant::now();
        let mut s = LeaseState::granted(TTL, t0);
        let end = s.poll_deadline().unwrap();
        s.handle_answer(t0 + Duration::from_millis(600), end);
        assert!(s.lost().is_some());
        assert_eq!(s.poll_deadline(), None);
        assert!(!s.may_serve(t0));
        assert_eq!(s.deadline(), Some(end), "the last deadline is kept");
        s.handle_answer(end, end);
        assert_eq!(s.poll_deadline(), None, "lost for good");
    }

    #[test]
    fn gone_is_final_and_keeps_the_first_reason() {
        let t0 = Instant::now();
        let mut s = LeaseState::granted(TTL, t0);
        s.handle_gone("revoked".into());
        s.handle_gone("deadline".into());
        assert_eq!(s.lost(), Some("revoked"));
        assert!(!s.may_serve(t0));
        s.handle_answer(t0, t0);
        assert!(!s.may_serve(t0));
    }
}
