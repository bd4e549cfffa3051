//! Engines started on a runtime they are given, driven from plain threads that have no tokio
//! runtime of their own (as the bridge's callers will be).

mod common;
use common::*;
use yuebing_engine::{EngineConfig, Error, TransferEngine, TransportKind};
use yuebing_testkit::patterns::pattern;

/// Two engines on `handle`, a write and a read of 1 MiB between them, all from this thread.
async fn round_trip_on(
    handle: tokio::runtime::Handle,
    transport: TransportKind,
) -> Result<(), Error> {
    let forced = EngineConfig {
        transport: Some(transport),
        ..EngineConfig::default()
    };
    let a = TransferEngine::start_on(forced, handle.clone()).await?;
    let b = TransferEngine::start_on(EngineConfig::default(), handle).await?;
    let src = a.allocate(1 << 20, false)?;
    let back = a.allocate(1 << 20, false)?;
    let dst = b.allocate_exported(1 << 20, false, RW)?;
    let data = pattern(1 << 20, 11);
    src.put(0, &data)?;
    let peer = a.open_segment(b.name()).await?;
    assert_eq!(a.selected_transport(peer)?, transport);
    a.write(src.addr(), peer, dst.addr(), 1 << 20).await?;
    a.read(back.addr(), peer, dst.addr(), 1 << 20).await?;
    assert!(read_back(&back, 0, 1 << 20) == data);
    Ok(())
}

#[test]
fn engines_started_on_a_given_runtime_work_from_plain_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for transport in [TransportKind::Tcp, TransportKind::Shm] {
        let handle = rt.handle().clone();
        let outcome = std::thread::spawn(move || {
            assert!(
                tokio::runtime::Handle::try_current().is_err(),
                "no ambient runtime"
            );
            futures::executor::block_on(round_trip_on(handle, transport))
        })
        .join()
        .unwrap();
        outcome.unwrap_or_else(|e| panic!("{transport:?}: {e}"));
    }
}
