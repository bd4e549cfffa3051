//! The machine's limits, measured like for like in the same run: single-thread memcpy, a raw
//! loopback TCP stream, and a raw loopback ping-pong (a block out, an 8-byte ack back), with
//! blocking sockets and, for reference, on tokio.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::cpu::cpu_seconds;

/// GB/s and CPU seconds per GB of one baseline measurement.
#[derive(Debug, Clone, Copy)]
pub(super) struct Measured {
    /// Gigabytes (1e9) per second.
    pub(super) gbps: f64,
    /// CPU seconds (this process) per gigabyte moved.
    pub(super) cpu_s_per_gb: f64,
}

fn measured(bytes: u64, elapsed: Duration, cpu: f64) -> Measured {
    let gb = bytes as f64 / 1e9;
    Measured {
        gbps: gb / elapsed.as_secs_f64(),
        cpu_s_per_gb: cpu / gb.max(1e-12),
    }
}

/// Copies `block`-sized chunks between two pre-faulted regions of `region` bytes, one thread.
pub(super) fn memcpy(block: usize, region: usize, duration: Duration) -> Measured {
    let src = vec![0x5Au8; region.max(block)];
    // Filled, not zeroed, so that every page is faulted in before the clock starts.
    let mut dst = vec![0xA5u8; region.max(block)];
    let chunks = (region / block).max(1);
    let (t0, c0) = (Instant::now(), cpu_seconds(None).unwrap_or(0.0));
    let mut bytes = 0u64;
    let mut i = 0;
    while t0.elapsed() < duration {
        let off = (i % chunks) * block;
        dst[off..off + block].copy_from_slice(&src[off..off + block]);
        bytes += block as u64;
        i += 1;
    }
    std::hint::black_box(&dst);
    measured(bytes, t0.elapsed(), cpu_seconds(None).unwrap_or(0.0) - c0)
}

fn pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let a = TcpStream::connect(l.local_addr()?)?;
    let (b, _) = l.accept()?;
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    Ok((a, b))
}

/// One thread writes `block`-sized chunks as fast as it can, another reads them.
pub(super) fn tcp_stream(block: usize, duration: Duration) -> std::io::Result<Measured> {
    let (mut tx, mut rx) = pair()?;
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; block.max(1 << 16)];
        let mut total = 0u64;
        while let Ok(n) = rx.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        total
    });
    let data = vec![0xA5u8; block];
    let (t0, c0) = (Instant::now(), cpu_seconds(None).unwrap_or(0.0));
    while t0.elapsed() < duration {
        tx.write_all(&data)?;
    }
    drop(tx);
    let bytes = reader.join().unwrap_or(0);
    Ok(measured(
        bytes,
        t0.elapsed(),
        cpu_seconds(None).unwrap_or(0.0) - c0,
    ))
}

/// A block out, an 8-byte ack back, one at a time: the ceiling of a write that waits for its
/// acknowledgement.
pub(super) fn tcp_ping_pong(block: usize, duration: Duration) -> std::io::Result<Measured> {
    let (mut tx, mut rx) = pair()?;
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; block];
        while rx.read_exact(&mut buf).is_ok() {
            if rx.write_all(&[0u8; 8]).is_err() {
                break;
            }
        }
    });
    let data = vec![0xA5u8; block];
    let mut ack = [0u8; 8];
    let (t0, c0) = (Instant::now(), cpu_seconds(None).unwrap_or(0.0));
    let mut bytes = 0u64;
    while t0.elapsed() < duration {
        tx.write_all(&data)?;
        tx.read_exact(&mut ack)?;
        bytes += block as u64;
    }
    let m = measured(bytes, t0.elapsed(), cpu_seconds(None).unwrap_or(0.0) - c0);
    drop(tx);
    let _ = echo.join();
    Ok(m)
}

/// The ping-pong of [`tcp_ping_pong`] with both ends on tokio: the initiator on the runtime
/// this is awaited on, the echo on a current-thread runtime of its own thread (as a target
/// process would be). Each side waits in `epoll_wait` and is woken, instead of sleeping inside
/// a blocking `read`: how much of a gap to the blocking ping-pong any tokio-based data plane
/// inherits.
pub(super) async fn tcp_ping_pong_tokio(
    block: usize,
    duration: Duration,
) -> std::io::Result<Measured> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tx, rx) = pair()?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        rt.block_on(async move {
            let mut rx = tokio::net::TcpStream::from_std(rx)?;
            let mut buf = vec![0u8; block];
            while rx.read_exact(&mut buf).await.is_ok() {
                if rx.write_all(&[0u8; 8]).await.is_err() {
                    break;
                }
            }
            Ok(())
        })
    });
    let mut tx = tokio::net::TcpStream::from_std(tx)?;
    let data = vec![0xA5u8; block];
    let mut ack = [0u8; 8];
    let (t0, c0) = (Instant::now(), cpu_seconds(None).unwrap_or(0.0));
    let mut bytes = 0u64;
    while t0.elapsed() < duration {
        tx.write_all(&data).await?;
        tx.read_exact(&mut ack).await?;
        bytes += block as u64;
    }
    let m = measured(bytes, t0.elapsed(), cpu_seconds(None).unwrap_or(0.0) - c0);
    drop(tx);
    // Joined off the runtime: the echo ends at the end of stream just sent.
    let _ = tokio::task::spawn_blocking(move || echo.join()).await;
    Ok(m)
}

/// The GPU's own ceiling for staged transfers: `len` bytes copied between pinned host memory
/// and GPU `gpu`, device to host for a write (the initiator's bytes leave the GPU), host to
/// device for a read, for `duration`.
pub(super) fn gpu_copy(
    gpu: u32,
    op: yuebing_engine::Opcode,
    len: usize,
    duration: Duration,
) -> Result<Measured, String> {
    #[cfg(feature = "cuda")]
    {
        let to_device = op == yuebing_engine::Opcode::Read;
        let c0 = cpu_seconds(None).unwrap_or(0.0);
        let (bytes, took) = yuebing_engine::gpu::pinned_copies(gpu, len, to_device, duration)
            .map_err(|e| e.to_string())?;
        Ok(measured(bytes, took, cpu_seconds(None).unwrap_or(0.0) - c0))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (op, len, duration);
        Err(format!(
            "--gpu {gpu}: this build has no GPU support (cargo feature `cuda`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_move_bytes() {
        let d = Duration::from_millis(30);
        assert!(memcpy(4096, 1 << 20, d).gbps > 0.0);
        assert!(tcp_stream(65536, d).unwrap().gbps > 0.0);
        assert!(tcp_ping_pong(4096, d).unwrap().gbps > 0.0);
        let rt = tokio::runtime::Runtime::new().unwrap();
        assert!(rt.block_on(tcp_ping_pong_tokio(4096, d)).unwrap().gbps > 0.0);
    }
}
