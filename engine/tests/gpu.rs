//! GPU memory (`cuda:N`, feature `cuda`). Without a CUDA driver (this project's CI) every GPU
//! registration is `NoCudaDriver` and the engine works on with host memory. With a driver
//! (`scripts/hw-check.sh`), device memory registered as `cuda:0` moves over `local`
//! (device↔host copies by the driver) and over tcp, staged through host buffers on both sides,
//! in every size class, at unaligned offsets.
#![cfg(feature = "cuda")]

mod common;
use common::*;
use yuebing_engine::gpu::{self, DeviceBuffer};
use yuebing_engine::{EngineConfig, Error, Location, RemoteAccess, TransferEngine, TransportKind};
use yuebing_testkit::patterns::pattern;

const GPU0: Location = Location::Cuda { device: 0 };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_driver_gpu_memory_is_refused_typed_and_host_memory_works_on() {
    if gpu::count().is_ok() {
        eprintln!("a CUDA driver is present: the hardware tests below run instead");
        return;
    }
    let e = TransferEngine::start(EngineConfig::default())
        .await
        .unwrap();
    let mut fake_device_memory = vec![0u8; 4096];
    // SAFETY (test): refused before anything is recorded or touched.
    let refused = unsafe {
        e.register_exported(
            fake_device_memory.as_mut_ptr(),
            4096,
            GPU0,
            RemoteAccess::READ_WRITE,
        )
    };
    assert!(
        matches!(refused, Err(Error::NoCudaDriver { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        DeviceBuffer::allocate(0, 4096),
        Err(Error::NoCudaDriver { .. })
    ));
    // The engine works on with host memory.
    let a = e.allocate(4096, false).unwrap();
    let b = e.allocate(4096, false).unwrap();
    a.put(0, &pattern(4096, 1)).unwrap();
    e.write(a.addr(), e.own_segment(), b.addr(), 4096)
        .await
        .unwrap();
    assert!(read_back(&b, 0, 4096) == pattern(4096, 1));
}

/// Device memory registered with `engine`, exported read-write.
fn device_memory(engine: &TransferEngine, len: usize) -> Option<DeviceBuffer> {
    if gpu::count().map_or(true, |n| n == 0) {
        eprintln!("no GPU here: skipped (scripts/hw-check.sh runs it where one is)");
        return None;
    }
    let d = DeviceBuffer::allocate(0, len).unwrap();
    // SAFETY (test): the device buffer outlives its registration (unregistered below, before
    // it is dropped) and is touched only through the engine and the driver's copies.
    unsafe { engine.register_exported(d.addr() as *mut u8, len, GPU0, RemoteAccess::READ_WRITE) }
        .unwrap();
    Some(d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_memory_moves_over_local_by_the_driver() {
    let e = TransferEngine::start(EngineConfig::default())
        .await
        .unwrap();
    let len = 16usize << 20;
    let Some(d) = device_memory(&e, len) else {
        return;
    };
    let host = e.allocate(len, false).unwrap();
    let back = e.allocate(len, false).unwrap();
    for (offset, size, seed) in [
        (0usize, 1usize, 1u64),
        (3, 4096, 2),
        (100, 1 << 20, 3),
        (7, (8 << 20) + 5, 4),
    ] {
        host.put(0, &pattern(size, seed)).unwrap();
        e.write(
            host.addr(),
            e.own_segment(),
            d.addr() + offset as u64,
            size as u64,
        )
        .await
        .unwrap();
        assert!(
            d.get(offset, size).unwrap() == pattern(size, seed),
            "{size} to the GPU"
        );
        e.read(
            back.addr(),
            e.own_segment(),
            d.addr() + offset as u64,
            size as u64,
        )
        .await
        .unwrap();
        assert!(
            read_back(&back, 0, size) == pattern(size, seed),
            "{size} from the GPU"
        );
    }
    e.unregister(d.addr()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_memory_moves_over_tcp_staged_on_both_sides() {
    let a = TransferEngine::start(EngineConfig {
        transport: Some(TransportKind::Tcp),
        ..EngineConfig::default()
    })
    .await
    .unwrap();
    let b = TransferEngine::start(EngineConfig::default())
        .await
        .unwrap();
    let len = 32usize << 20;
    let Some(remote) = device_memory(&b, len) else {
        return;
    };
    let Some(local) = device_memory(&a, len) else {
        return;
    };
    let peer = a.open_segment(b.name()).await.unwrap();
    for (size, seed) in [
        (1usize, 1u64),
        (4096 + 3, 2),
        ((1 << 20) + 1, 3),
        (24 << 20, 4),
    ] {
        local.put(0, &pattern(size, seed)).unwrap();
        a.write(local.addr(), peer, remote.addr() + 5, size as u64)
            .await
            .unwrap();
        assert!(
            remote.get(5, size).unwrap() == pattern(size, seed),
            "{size}: GPU to GPU over tcp"
        );
        local.put(0, &vec![0u8; size]).unwrap();
        a.read(local.addr(), peer, remote.addr() + 5, size as u64)
            .await
            .unwrap();
        assert!(
            local.get(0, size).unwrap() == pattern(size, seed),
            "{size}: read back"
        );
    }
    a.unregister(local.addr()).unwrap();
    b.unregister(remote.addr()).unwrap();
}
