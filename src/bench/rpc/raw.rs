//! The ceiling for large payloads: a raw length-prefixed echo over one tokio TCP connection,
//! pipelined (several requests outstanding, answered in order).

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Serves the raw echo on 127.0.0.1: read `u32` length and payload, write them back.
pub(super) async fn serve() -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Ok(len) = stream.read_u32().await else {
                        return;
                    };
                    buf.resize(len as usize, 0);
                    if stream.read_exact(&mut buf).await.is_err() {
                        return;
                    }
                    let header = len.to_be_bytes();
                    let mut parts = [std::io::IoSlice::new(&header), std::io::IoSlice::new(&buf)];
                    if write_all_vectored(&mut stream, &mut parts).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok((addr, task))
}

async fn write_all_vectored(
    stream: &mut TcpStream,
    mut parts: &mut [std::io::IoSlice<'_>],
) -> std::io::Result<()> {
    while !parts.is_empty() {
        let n = stream.write_vectored(parts).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

type Pending = oneshot::Sender<Bytes>;

/// A pipelined client of the raw echo over one connection.
#[derive(Clone)]
pub(super) struct RawClient {
    requests: mpsc::Sender<(Bytes, Pending)>,
}

impl RawClient {
    /// Connects and starts the writer and reader tasks.
    pub(super) async fn connect(addr: SocketAddr) -> std::io::Result<RawClient> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut rd, mut wr) = stream.into_split();
        let (requests, mut incoming) = mpsc::channel::<(Bytes, Pending)>(1024);
        let (order_tx, mut order_rx) = mpsc::unbounded_channel::<Pending>();
        tokio::spawn(async move {
            while let Some((payload, done)) = incoming.recv().await {
                if order_tx.send(done).is_err() {
                    return;
                }
                let header = (payload.len() as u32).to_be_bytes();
                let mut parts = [
                    std::io::IoSlice::new(&header),
                    std::io::IoSlice::new(&payload),
                ];
                let mut parts = &mut parts[..];
                while !parts.is_empty() {
                    match wr.write_vectored(parts).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => std::io::IoSlice::advance_slices(&mut parts, n),
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some(done) = order_rx.recv().await {
                let Ok(len) = rd.read_u32().await else { return };
                let len = len as usize;
                let mut buf = BytesMut::with_capacity(len);
                while buf.len() < len {
                    let missing = len - buf.len();
                    let mut room = (&mut buf).limit(missing);
                    match rd.read_buf(&mut room).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
                let _ = done.send(buf.freeze());
            }
        });
        Ok(RawClient { requests })
    }

    /// Sends `payload` and waits for it to come back.
    pub(super) async fn echo(&self, payload: Bytes) -> Result<Bytes, String> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send((payload, tx))
            .await
            .map_err(|_| "raw echo connection closed".to_string())?;
        rx.await
            .map_err(|_| "raw echo connection closed".to_string())
    }
}
