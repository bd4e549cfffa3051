//! Connecting queue pairs: what the initiator asks over the engine's control service
//! (yuebing-rpc), what the target answers, and the target's table of the queue pairs it
//! accepted.
//!
//! The initiator makes a queue pair on its NIC and sends its end (GID, LID, QPN, PSN, its
//! port's MTU) with the name of the target NIC it wants and the target instance it means; the
//! target makes one on that NIC, connects it with the negotiated MTU (the smaller of the two
//! ports': [`negotiate`]) and answers with its own end; the initiator connects to it with the
//! same negotiation. A request for an earlier instance of the target is refused as stale.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::verbs::{negotiate, Nic, QpEndpoint, QueuePair};
use crate::error::Error;

/// The most queue pairs a target keeps for one initiator (its NIC pairs, reconnected a few
/// times); the oldest go first.
const MAX_ACCEPTED_PER_PEER: usize = 256;

/// The initiator's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ConnectRequest {
    /// The initiator's segment name.
    pub from: String,
    /// The initiator's instance: a new one replaces the queue pairs of the old.
    pub from_instance: u64,
    /// The target instance the initiator means.
    pub to_instance: u64,
    /// The target NIC to connect to.
    pub nic: String,
    /// The initiator's end.
    pub endpoint: QpEndpoint,
}

/// The target's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ConnectReply {
    /// Connected: the target's end.
    Accepted(QpEndpoint),
    /// Refused: the engine error's code and message.
    Refused {
        /// The error's code.
        code: i32,
        /// Its message.
        reason: String,
    },
}

impl ConnectReply {
    /// The target's end, or the refusal as an error (a stale instance as
    /// [`Error::StaleSegment`]).
    pub(crate) fn into_result(self, segment: &str, expected: u64) -> Result<QpEndpoint, Error> {
        match self {
            ConnectReply::Accepted(end) => Ok(end),
            ConnectReply::Refused { code, .. }
                if code
                    == (Error::StaleSegment {
                        segment: String::new(),
                        expected: 0,
                        actual: 0,
                    })
                    .code() =>
            {
                Err(Error::StaleSegment {
                    segment: segment.to_string(),
                    expected,
                    actual: 0,
                })
            }
            ConnectReply::Refused { code, reason } => Err(Error::PeerFailed {
                reason: format!("rdma: {segment} refused the connection ({code}): {reason}"),
            }),
        }
    }
}

/// Connects `qp` to `remote`, with the MTU both ends agree on.
pub(crate) fn connect(qp: &dyn QueuePair, remote: &QpEndpoint) -> Result<(), Error> {
    let mtu = negotiate(&qp.local(), remote)?;
    qp.connect(remote, mtu)
}

/// The queue pairs a target accepted, by initiator name.
#[derive(Default)]
pub(crate) struct Accepted {
    peers: Mutex<HashMap<String, Kept>>,
}

/// An initiator's instance and the queue pairs kept for it, oldest first.
type Kept = (u64, VecDeque<Arc<dyn QueuePair>>);

impl Accepted {
    /// Serves one request: a queue pair on `nics[..]` named by the request, connected to the
    /// initiator's end. `instance` is this engine's.
    pub(crate) fn accept(
        &self,
        nics: &[Arc<dyn Nic>],
        instance: u64,
        depth: u32,
        request: &ConnectRequest,
    ) -> Result<QpEndpoint, Error> {
        if request.to_instance != instance {
            return Err(Error::StaleSegment {
                segment: String::new(),
                expected: request.to_instance,
                actual: instance,
            });
        }
        let nic = nics
            .iter()
            .find(|n| n.info().name == request.nic)
            .ok_or_else(|| Error::invalid(format!("rdma: no NIC {:?} here", request.nic)))?;
        let qp = nic.create_qp(depth)?;
        connect(&*qp, &request.endpoint)?;
        let end = qp.local();
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = peers
            .entry(request.from.clone())
            .or_insert_with(|| (request.from_instance, VecDeque::new()));
        if entry.0 != request.from_instance {
            // The initiator restarted: its old queue pairs lead nowhere.
            *entry = (request.from_instance, VecDeque::new());
        }
        entry.1.push_back(qp);
        while entry.1.len() > MAX_ACCEPTED_PER_PEER {
            if let Some(old) = entry.1.pop_front() {
                old.fail();
            }
        }
        Ok(end)
    }

    /// Queue pairs kept for initiators.
    pub(crate) fn count(&self) -> usize {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.values().map(|(_, q)| q.len()).sum()
    }
}
