//! [`HaGate`]: an elected master serves only while it holds a leadership that may serve now
//! (past its margin, before its lease's deadline, not lost), and never after its log failed.
//! Otherwise every call gets `NotLeader`, naming the leader it last saw.

use std::sync::Mutex;
use std::time::Instant;

use yuebing_store::master::ServeGate;

use crate::election::Leadership;

/// Whether this master leads, and who does if it does not.
#[derive(Debug, Default)]
pub struct HaGate {
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    /// This master's leadership, while it leads.
    leadership: Option<Leadership>,
    /// The leader's rpc address as last observed (for `NotLeader`).
    leader: Option<String>,
}

impl HaGate {
    /// A closed gate.
    pub fn new() -> HaGate {
        HaGate::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This master leads with `leadership` (it serves while that may serve).
    pub fn open(&self, leadership: Leadership) {
        self.lock().leadership = Some(leadership);
    }

    /// This master no longer leads; the leadership, if it had one, is handed back (to resign).
    pub fn close(&self) -> Option<Leadership> {
        self.lock().leadership.take()
    }

    /// Who leads, as observed (`None`: nobody, or not known).
    pub fn set_leader(&self, address: Option<String>) {
        self.lock().leader = address;
    }

    /// The leader's address as last observed.
    pub fn leader(&self) -> Option<String> {
        self.lock().leader.clone()
    }

    /// Whether this master leads and may serve now.
    pub fn serving(&self) -> bool {
        self.lock()
            .leadership
            .as_ref()
            .is_some_and(|l| l.may_serve(Instant::now()))
    }
}

impl ServeGate for HaGate {
    fn check(&self) -> yuebing_store::Result<()> {
        let state = self.lock();
        match &state.leadership {
            Some(l) if l.may_serve(Instant::now()) => Ok(()),
            _ => Err(yuebing_store::Error::NotLeader {
                leader: state.leader.clone(),
            }),
        }
    }
}
