//! The nodes a client transfers with: cached segment handles, replica order (same process, same
//! host, remote), and a short back-off for a node whose transfer just failed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use yuebing_engine::{SegmentHandle, TransferEngine};

use crate::error::{Error, Result};
use crate::master::ReplicaDesc;

pub(crate) struct Peers {
    engine: TransferEngine,
    handles: Mutex<HashMap<String, SegmentHandle>>,
    failed: Mutex<HashMap<String, Instant>>,
    avoid: Duration,
}

fn host(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(h, _)| h)
}

impl Peers {
    pub(crate) fn new(engine: TransferEngine, avoid: Duration) -> Peers {
        Peers {
            engine,
            handles: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            avoid,
        }
    }

    /// The segment handle of `node`, opened once (its descriptor fetched by the engine).
    pub(crate) async fn handle(&self, node: &str, until: Instant) -> Result<SegmentHandle> {
        if let Some(&h) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
        {
            return Ok(h);
        }
        let h = tokio::time::timeout_at(until.into(), self.engine.open_segment(node))
            .await
            .map_err(|_| Error::Timeout)??;
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.to_string(), h);
        Ok(h)
    }

    /// Marks `node` as just failed: it is tried last for a while, and its handle is reopened.
    pub(crate) fn failed(&self, node: &str) {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.to_string(), Instant::now());
        if let Some(h) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(node)
        {
            let _ = self.engine.close_segment(h);
        }
    }

    /// Replicas in the order to try: this process, this host, other hosts; nodes that failed
    /// within the back-off go last.
    pub(crate) fn order<'a>(&self, replicas: &'a [ReplicaDesc]) -> Vec<&'a ReplicaDesc> {
        let me = self.engine.name();
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut v: Vec<&ReplicaDesc> = replicas.iter().collect();
        v.sort_by_key(|d| {
            let recent = failed
                .get(&d.node)
                .is_some_and(|t| now.duration_since(*t) < self.avoid);
            let distance = if d.node == me {
                0
            } else if host(&d.node) == host(me) {
                1
            } else {
                2
            };
            (recent, distance)
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::host;

    #[test]
    fn host_of_a_segment_name() {
        assert_eq!(host("127.0.0.1:4000"), "127.0.0.1");
        assert_eq!(host("[::1]:4000"), "[::1]");
        assert_eq!(host("name"), "name");
    }
}
