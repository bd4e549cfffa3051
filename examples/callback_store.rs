//! The store from callback-driven code, through the bridge's `*_call(..).then(callback)` forms:
//! connect to a running master, put three objects, get them back, read one into registered
//! memory without a copy (`get_into`), remove them. Each callback runs once, on the bridge's
//! callback pool; it may start the next call (it must not block on the bridge). This thread
//! only waits for the results on a channel. `async_store` and `blocking_store` do the same in
//! the other two ways.
//!
//! ```sh
//! cargo run -- master &                                  # a master on 127.0.0.1:50051
//! cargo run --example callback_store -- 127.0.0.1:50051 # or YUEBING_MASTERS=127.0.0.1:50051
//! ```

mod common;

use std::sync::mpsc::channel;

use yuebing::bridge::{BlockingClient, Bridge, BridgeConfig};
use yuebing::store::Options;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bridge = Bridge::new(BridgeConfig::default())?;
    let client = BlockingClient::start(&bridge, common::config("callback_store"))?;
    let opts = Options::default();
    let objects = common::objects();

    // Per object: put, and from the put's callback the get; the get's callback reports.
    let (tx, rx) = channel();
    for (key, value) in &objects {
        let (c, o, tx, key2) = (client.clone(), opts.clone(), tx.clone(), key.clone());
        client
            .call(|c| c.put(key, value, &opts))
            .then(move |put| match put {
                Err(e) => drop(tx.send((key2, Err(e)))),
                Ok(()) => c
                    .call(|c| c.get(&key2, &o))
                    .then(move |got| drop(tx.send((key2, got)))),
            });
    }
    for _ in &objects {
        let (key, got) = rx.recv()?;
        let back = got?;
        let (_, value) = objects
            .iter()
            .find(|(k, _)| *k == key)
            .expect("one of ours");
        assert_eq!(&back, value, "{key}");
        println!("put and got back {key}: {} bytes", back.len());
    }

    // Registered memory of the client's engine: the transfer writes straight into it.
    let (key, value) = &objects[2];
    let buf = client.client().engine().allocate(value.len(), true)?;
    let (tx, rx) = channel();
    client
        .call(|c| c.get_into(key, buf.addr(), buf.len() as u64, &opts))
        .then(move |r| drop(tx.send(r)));
    let size = rx.recv()??;
    let mut back = vec![0u8; size as usize];
    // SAFETY: the get_into's callback ran, so its transfer is over, and no other transfer into
    // or out of `buf` was started: nothing writes it while we read.
    unsafe { buf.read_at(0, &mut back) }?;
    assert_eq!(&back, value);
    println!("read {key} into registered memory: {size} bytes");

    let (tx, rx) = channel();
    for (key, _) in &objects {
        let tx = tx.clone();
        // The gets above hold read leases for a while: remove anyway (force).
        client
            .call(|c| c.remove(key, true, &opts))
            .then(move |r| drop(tx.send(r)));
    }
    for _ in &objects {
        rx.recv()??;
    }
    let (tx, rx) = channel();
    client
        .call(|c| c.close(&opts))
        .then(move |r| drop(tx.send(r)));
    rx.recv()??;
    println!("removed {} objects", objects.len());
    // Returns once every call and callback of the bridge has ended.
    bridge.shutdown()?;
    Ok(())
}
