//! Following the elected master: a task that observes the election and publishes the
//! leader's address in a `watch` channel, which a store client takes as its leader source
//! (`ClientConfig::leader`) and a standby uses to name the leader in `NotLeader`.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use yuebing_rpc::Endpoint;

use crate::election::Election;
use crate::task::Task;

/// The pause before observing again after the stream broke (etcd unreachable).
const RETRY: Duration = Duration::from_millis(250);

/// The leader's address as the election reports it, kept current by a task that stops when
/// this is dropped.
#[derive(Debug)]
pub struct LeaderWatch {
    rx: watch::Receiver<Option<Endpoint>>,
    _task: Task,
}

impl LeaderWatch {
    /// Follows `election`'s leader on `handle`'s runtime. Until a leader is known the channel
    /// holds `None`; after that it keeps the last leader seen until another wins (a leader
    /// that died shows as unreachable until then).
    pub fn start(election: Election, handle: &tokio::runtime::Handle) -> LeaderWatch {
        let (tx, rx) = watch::channel(None);
        let task = handle.spawn(async move { follow(election, &tx).await });
        LeaderWatch {
            rx,
            _task: Task::new(task),
        }
    }

    /// Follows `election`'s leader on `handle`'s runtime, like [`LeaderWatch::start`], with no
    /// guard to hold: the task (and `election`'s client with it) ends once every receiver of
    /// the returned channel is dropped.
    pub fn detached(
        election: Election,
        handle: &tokio::runtime::Handle,
    ) -> watch::Receiver<Option<Endpoint>> {
        let (tx, rx) = watch::channel(None);
        handle.spawn(async move {
            tokio::select! {
                () = follow(election, &tx) => {}
                () = tx.closed() => {}
            }
        });
        rx
    }

    /// A receiver of the leader's address (for `ClientConfig::leader`); it stays current as
    /// long as this `LeaderWatch` lives.
    pub fn receiver(&self) -> watch::Receiver<Option<Endpoint>> {
        self.rx.clone()
    }

    /// The leader's address now, if known.
    pub fn current(&self) -> Option<Endpoint> {
        self.rx.borrow().clone()
    }
}

async fn follow(election: Election, tx: &watch::Sender<Option<Endpoint>>) {
    let publish = |address: &str| match address.parse::<Endpoint>() {
        Ok(e) => {
            tx.send_if_modified(|now| {
                let changed = now.as_ref() != Some(&e);
                *now = Some(e);
                changed
            });
        }
        Err(_) => tracing::warn!(address, "the elected master's address does not parse"),
    };
    // Whether the last read of the leader failed: an outage is reported once, at `warn` (a
    // client whose calls then wait for a leader in vain says why on its log), its retries at
    // `debug`.
    let mut failing = false;
    loop {
        // Who leads now, then each new leader.
        match election.leader().await {
            Ok(found) => {
                if std::mem::take(&mut failing) {
                    tracing::info!(election = election.name(), "reading the leader works again");
                }
                if let Some(info) = found {
                    publish(&info.address);
                }
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, election = election.name(),
                    "cannot read the elected master from etcd; trying again");
            }
            Err(e) => tracing::debug!(error = %e, "reading the leader failed"),
        }
        let mut stream = election.observe();
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => publish(&info.address),
                Err(e) => {
                    tracing::debug!(error = %e, "observing the election broke; observing again");
                    break;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(RETRY).await;
    }
}
