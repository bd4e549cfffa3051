//! The client's heartbeat: a ping every interval; on `NeedRemount` (the master restarted or
//! expired this client) the store space is mounted again.

use std::sync::Weak;

use super::Inner;
use crate::master::PingResult;

/// The heartbeat task; it stops when dropped, when the client is gone, or at `stop`.
pub(crate) struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    pub(crate) fn start(inner: Weak<Inner>, handle: &tokio::runtime::Handle) -> Heartbeat {
        Heartbeat(handle.spawn(async move {
            loop {
                let Some(every) = inner.upgrade().map(|i| i.cfg.heartbeat) else {
                    return;
                };
                tokio::time::sleep(every).await;
                let Some(client) = inner.upgrade() else {
                    return;
                };
                beat(&client, every * 3).await;
            }
        }))
    }
}

impl Heartbeat {
    /// Stops the pings (a closed client must not remount its space).
    pub(crate) fn stop(&self) {
        self.0.abort();
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn beat(c: &Inner, bound: std::time::Duration) {
    let ping = c.masters.call(|m| async move { m.ping().await });
    match tokio::time::timeout(bound, ping).await {
        Ok(Ok(PingResult::Ok)) => {}
        Ok(Ok(PingResult::NeedRemount)) => {
            let remount = c.masters.call(|m| {
                let specs = c.specs.clone();
                async move { m.remount(specs).await }
            });
            match tokio::time::timeout(bound, remount).await {
                Ok(Ok(ids)) => {
                    *c.lock_mounts() = ids;
                    tracing::info!(client = %c.id, "store space mounted again")
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "remount failed; retrying"),
                Err(_) => tracing::warn!("remount timed out; retrying"),
            }
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "ping failed"),
        Err(_) => tracing::warn!("ping timed out"),
    }
}
