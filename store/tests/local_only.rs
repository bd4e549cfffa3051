//! Only exported memory is reachable, at store level: a node's store space is exported for
//! peers' reads and writes, while staging buffers and `get_into` destinations are local-only.
//! Puts and gets still work (each client initiates its transfers into and out of the nodes'
//! store space), but another engine's raw reads and writes of a staging buffer or a `get_into`
//! destination are refused, over tcp and over shm, and change nothing.

use yuebing_engine::{
    EngineBuffer, EngineConfig, RemoteAccess, TransferEngine, TransferRequest, TransportKind,
};
use yuebing_rpc::Endpoint;
use yuebing_store::master::{MasterServerConfig, RunningMaster};
use yuebing_store::{Client, ClientConfig, Options};

/// Bytes of each probed range.
const LEN: usize = 4096;

async fn client(master: &Endpoint, store_size: u64) -> Client {
    Client::start(ClientConfig {
        masters: vec![master.clone()],
        store_size,
        staging_size: 1 << 20,
        ..ClientConfig::default()
    })
    .await
    .expect("client starts")
}

/// `LEN` bytes at `addr` in `owner`'s memory, read by `owner`'s own engine (its `local`
/// transport reaches local-only memory: it is no remote access).
async fn snapshot(owner: &Client, addr: u64) -> Vec<u8> {
    let engine = owner.engine();
    let buf = engine.allocate(LEN, false).unwrap();
    engine
        .read(buf.addr(), engine.own_segment(), addr, LEN as u64)
        .await
        .unwrap();
    bytes(&buf)
}

fn bytes(buf: &EngineBuffer) -> Vec<u8> {
    let mut out = vec![0u8; LEN];
    // SAFETY (test): the buffer is local-only and no transfer on it is in flight.
    unsafe { buf.read_at(0, &mut out) }.unwrap();
    out
}

fn fill(buf: &EngineBuffer, byte: u8) {
    // SAFETY (test): the buffer is local-only and no transfer on it is in flight.
    unsafe { buf.write_at(0, &[byte; LEN]) }.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_reading_or_writing_a_staging_buffer_or_a_get_into_destination_is_refused() {
    let bind: Endpoint = "127.0.0.1:0".parse().unwrap();
    let master = RunningMaster::start(MasterServerConfig::default(), &bind)
        .await
        .unwrap();
    let at = master.local_endpoint().clone();
    let node = client(&at, 16 << 20).await;
    let user = client(&at, 0).await;
    let opts = Options::default();

    // Puts and gets work: the user writes into the node's store space and reads from it.
    let value: Vec<u8> = (0..LEN).map(|i| (i * 7) as u8).collect();
    user.put("k", &value, &opts).await.unwrap();
    assert_eq!(user.get("k", &opts).await.unwrap(), value);
    let dst = user.engine().allocate(LEN, true).unwrap();
    assert_eq!(
        user.get_into("k", dst.addr(), LEN as u64, &opts)
            .await
            .unwrap(),
        LEN as u64
    );
    assert_eq!(bytes(&dst), value);

    // The descriptors publish the store space only, exported for both directions.
    let published = |c: &Client| -> Vec<RemoteAccess> {
        let d = c.engine().descriptor();
        d.buffers.iter().map(|b| b.remote).collect()
    };
    assert_eq!(published(&node), [RemoteAccess::READ_WRITE]);
    assert!(
        published(&user).is_empty(),
        "staging and dst are local-only"
    );

    let targets: [(&str, &Client, u64); 3] = [
        ("the node's staging", &node, node.staging_addr().unwrap()),
        ("the user's staging", &user, user.staging_addr().unwrap()),
        ("the get_into destination", &user, dst.addr()),
    ];
    for transport in [TransportKind::Tcp, TransportKind::Shm] {
        let peer_engine = TransferEngine::start(EngineConfig {
            transport: (transport == TransportKind::Tcp).then_some(transport),
            ..EngineConfig::default()
        })
        .await
        .unwrap();
        let src = peer_engine.allocate(LEN, false).unwrap();
        let back = peer_engine.allocate(LEN, false).unwrap();
        fill(&src, 0xEE);
        fill(&back, 0x11);
        for (what, owner, addr) in targets {
            let peer = peer_engine
                .open_segment(owner.engine().name())
                .await
                .unwrap();
            assert_eq!(peer_engine.selected_transport(peer).unwrap(), transport);
            let before = snapshot(owner, addr).await;
            for skip_initiator_checks in [false, true] {
                let requests = [
                    TransferRequest::write(src.addr(), peer, addr, LEN as u64),
                    TransferRequest::read(back.addr(), peer, addr, LEN as u64),
                ];
                for mut req in requests {
                    req.skip_initiator_checks = skip_initiator_checks;
                    let case = format!(
                        "{transport:?} {:?} of {what} (unchecked: {skip_initiator_checks})",
                        req.opcode
                    );
                    let err = peer_engine.transfer(req).await.unwrap_err();
                    assert_eq!(err.code(), -3504, "{case}: {err:?}");
                    assert_eq!(snapshot(owner, addr).await, before, "{case}: written");
                    assert_eq!(bytes(&back), [0x11; LEN], "{case}: read");
                }
            }
            peer_engine.close_segment(peer).unwrap();
        }
        // The same engine reaches the node's store space, which is exported.
        let node_peer = peer_engine
            .open_segment(node.engine().name())
            .await
            .unwrap();
        let space = node.engine().descriptor().buffers[0];
        peer_engine
            .read(back.addr(), node_peer, space.addr, LEN as u64)
            .await
            .unwrap();
    }
    assert_eq!(user.get("k", &opts).await.unwrap(), value, "still served");
}
