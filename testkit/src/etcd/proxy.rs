//! [`TcpProxy`]: a loopback TCP proxy in front of one etcd member, which a test can cut.

use std::net::SocketAddr;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

use crate::error::{Error, Result};

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards them to the target.
    Forward,
    /// Accepts new ones and holds them open, silent, until restored (a network partition).
    Blackhole,
    /// Closes new ones at once (a peer that is gone).
    Refuse,
}

/// The proxy's state, watched by every connection.
#[derive(Debug, Clone, Copy)]
struct State {
    mode: Mode,
    /// How many times it was cut: a forwarded connection ends when this changes.
    cuts: u64,
}

/// Forwards `127.0.0.1:<port>` to one target on 127.0.0.0/8 (an etcd member), until a test
/// cuts it. Give a client [`TcpProxy::endpoint`] instead of the member's. Its tasks live on the
/// runtime it was started on and stop when it is dropped, closing every connection.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    target: SocketAddr,
    state: watch::Sender<State>,
    /// The accepting task, which owns every connection's task: aborted on drop.
    task: AbortHandle,
}

impl TcpProxy {
    /// A proxy to `target` (`127.x.y.z:port`) on the current runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime; use [`TcpProxy::start_on`] there.
    pub async fn start(target: &str) -> Result<TcpProxy> {
        Self::start_on(target, Handle::current()).await
    }

    /// A proxy to `target` (`127.x.y.z:port`) whose tasks live on `handle`'s runtime.
    pub async fn start_on(target: &str, handle: Handle) -> Result<TcpProxy> {
        let target: SocketAddr = (target.parse())
            .map_err(|e| Error::process(format!("proxy target {target:?}: {e}")))?;
        let loopback_v4 = matches!(target, SocketAddr::V4(a) if a.ip().is_loopback());
        if !loopback_v4 {
            return Err(Error::process(format!(
                "proxy target {target} is not on 127.0.0.0/8"
            )));
        }
        let listener = handle
            .spawn(TcpListener::bind("127.0.0.1:0"))
            .await
            .map_err(|e| Error::process(format!("the proxy's bind task ended: {e}")))?
            .map_err(|e| Error::process(format!("proxy bind: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::process(format!("proxy address: {e}")))?;
        let (state, watcher) = watch::channel(State {
            mode: Mode::Forward,
            cuts: 0,
        });
        let task = handle
            .spawn(serve(listener, target, watcher))
            .abort_handle();
        Ok(TcpProxy {
            addr,
            target,
            state,
            task,
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The address it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Cuts the target off: closes every forwarded connection, and holds new ones open without
    /// forwarding a byte (like a partition: clients time out) until [`TcpProxy::restore`].
    pub fn cut(&self) {
        self.set(Mode::Blackhole);
    }

    /// Like [`TcpProxy::cut`], but new connections are closed at once (like a peer that is
    /// gone: clients fail fast).
    pub fn refuse(&self) {
        self.set(Mode::Refuse);
    }

    /// Forwards new connections again; the ones held by a cut are closed, so that their
    /// clients reconnect.
    pub fn restore(&self) {
        self.state.send_modify(|s| s.mode = Mode::Forward);
    }

    fn set(&self, mode: Mode) {
        self.state.send_modify(|s| {
            s.mode = mode;
            s.cuts += 1;
        });
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections and hands each to a task of the set, which goes with this task.
async fn serve(listener: TcpListener, target: SocketAddr, state: watch::Receiver<State>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((inbound, _)) = accepted else {
                    // Out of file descriptors, say: do not spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let now = *state.borrow();
                match now.mode {
                    Mode::Forward => {
                        connections.spawn(forward(inbound, target, now.cuts, state.clone()));
                    }
                    Mode::Blackhole => {
                        connections.spawn(hold(inbound, state.clone()));
                    }
                    Mode::Refuse => drop(inbound),
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forwards one connection both ways until either side closes or the proxy is cut.
async fn forward(
    mut inbound: TcpStream,
    target: SocketAddr,
    cuts: u64,
    mut state: watch::Receiver<State>,
) {
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = state.wait_for(|s| s.cuts != cuts) => {}
    }
}

/// Holds a connection made while cut: reads and drops what the client sends, answers nothing,
/// and closes it when the client does or the proxy is restored.
async fn hold(mut inbound: TcpStream, mut state: watch::Receiver<State>) {
    let mut sink = [0u8; 4096];
    loop {
        tokio::select! {
            read = inbound.read(&mut sink) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = state.wait_for(|s| s.mode == Mode::Forward) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    async fn echo_server() -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, task)
    }

    async fn echoes(endpoint: &str) -> bool {
        let attempt = async {
            let mut s = TcpStream::connect(endpoint).await.ok()?;
            s.write_all(b"ping").await.ok()?;
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.ok()?;
            Some(&buf == b"ping")
        };
        matches!(
            tokio::time::timeout(Duration::from_millis(500), attempt).await,
            Ok(Some(true))
        )
    }

    #[tokio::test]
    async fn forwards_cuts_and_restores() {
        let (addr, server) = echo_server().await;
        let proxy = TcpProxy::start(&addr.to_string()).await.unwrap();
        assert!(echoes(&proxy.endpoint()).await);

        let mut open = TcpStream::connect(proxy.endpoint()).await.unwrap();
        open.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).await.unwrap();
        proxy.cut();
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest));
        assert!(closed.await.is_ok(), "a cut closes forwarded connections");
        assert!(!echoes(&proxy.endpoint()).await, "blackholed while cut");

        proxy.refuse();
        let mut refused = TcpStream::connect(proxy.endpoint()).await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(5), refused.read(&mut one));
        assert!(matches!(read.await, Ok(Ok(0) | Err(_))), "closed at once");

        proxy.restore();
        assert!(echoes(&proxy.endpoint()).await, "forwarding again");
        server.abort();
    }

    #[tokio::test]
    async fn only_loopback_targets() {
        for target in ["10.0.0.1:2379", "[::1]:1", "example.com:1"] {
            assert!(TcpProxy::start(target).await.is_err(), "{target}");
        }
    }
}
