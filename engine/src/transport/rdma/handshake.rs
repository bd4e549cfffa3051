//! Connecting queue pairs: what the initiator asks over the engine's control service
//! (yuebing-rpc), what the target answers, and the target's table of the queue pairs it
//! accepted.
//!
//! The initiator makes a queue pair on its NIC and sends its end (GID, LID, QPN, PSN, its
//! port's MTU) with the name of the target NIC it wants and the target instance it means; the
//! target makes one on that NIC, connects it with the negotiated MTU (the smaller of the two
//! ports': [`negotiate`]) and answers with its own end; the initiator connects to it with the
//! same negotiation. A request for an earlier instance of the target is refused as stale.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::verbs::{negotiate, Nic, QpEndpoint, QueuePair};
use crate::error::Error;

/// The most initiators a target keeps queue pairs for; past it, new ones are refused.
const MAX_INITIATORS: usize = 1024;

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

/// The queue pairs a target accepted: for each initiator (by name), its instance and one
/// queue pair per (its NIC, this target's NIC). A reconnect of a path replaces its queue pair
/// (the initiator dropped the old one: it failed, or a cancel failed it); a new instance of the
/// initiator replaces all of them. So what a target keeps is bounded by its initiators' NIC
/// pairs.
#[derive(Default)]
pub(crate) struct Accepted {
    peers: Mutex<HashMap<String, Kept>>,
}

/// An initiator's instance and its queue pairs by (its NIC, this target's NIC).
type Kept = (u64, HashMap<(String, String), Arc<dyn QueuePair>>);

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
        {
            let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            if peers.len() >= MAX_INITIATORS && !peers.contains_key(&request.from) {
                return Err(Error::Overloaded {
                    reason: format!("rdma: queue pairs kept for {MAX_INITIATORS} initiators"),
                });
            }
        }
        let qp = nic.create_qp(depth)?;
        connect(&*qp, &request.endpoint)?;
        let end = qp.local();
        let replaced = {
            let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let entry = peers
                .entry(request.from.clone())
                .or_insert_with(|| (request.from_instance, HashMap::new()));
            if entry.0 != request.from_instance {
                // The initiator restarted: its old queue pairs lead nowhere.
                *entry = (request.from_instance, HashMap::new());
            }
            let path = (request.endpoint.nic.clone(), request.nic.clone());
            entry.1.insert(path, qp)
        };
        if let Some(old) = replaced {
            old.fail();
        }
        Ok(end)
    }

    /// Queue pairs kept for initiators.
    pub(crate) fn count(&self) -> usize {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.values().map(|(_, q)| q.len()).sum()
    }
}
