//! The baseline: stock tarpc, its own transport (length-delimited frames, bincode).
//!
//! TCP_NODELAY is set on both ends, as yuebing sets it, so small-message latency compares
//! the stacks rather than Nagle's algorithm.

use std::net::SocketAddr;

use futures::StreamExt;
use tarpc::serde_transport;
use tarpc::server::{BaseChannel, Channel};
use tarpc::tokio_serde::formats::Bincode;
use tarpc::tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::service::{BenchEcho, BenchEchoClient, EchoImpl};

const MAX_FRAME: usize = 64 << 20;

fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// Serves the echo service with stock tarpc on 127.0.0.1; returns its address and accept task.
pub(super) async fn serve() -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let transport = serde_transport::new(Framed::new(stream, codec()), Bincode::default());
            let channel = BaseChannel::with_defaults(transport);
            tokio::spawn(
                channel
                    .execute(EchoImpl.serve())
                    .for_each(|call| async move {
                        tokio::spawn(call);
                    }),
            );
        }
    });
    Ok((addr, task))
}

/// A stock tarpc client over one new connection.
pub(super) async fn connect(addr: SocketAddr) -> std::io::Result<BenchEchoClient> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let transport = serde_transport::new(Framed::new(stream, codec()), Bincode::default());
    Ok(BenchEchoClient::new(tarpc::client::Config::default(), transport).spawn())
}
