//! The store from plain threads, through the bridge's blocking client: connect to a running
//! master, put three objects, get them back, read one into registered memory without a copy
//! (`get_into`), remove them. No async anywhere: the bridge owns the runtime the calls run on.
//! `async_store` and `callback_store` do the same in the other two ways.
//!
//! ```sh
//! cargo run -- master &                                  # a master on 127.0.0.1:50051
//! cargo run --example blocking_store -- 127.0.0.1:50051 # or YUEBING_MASTERS=127.0.0.1:50051
//! ```

mod common;

use yuebing::bridge::{BlockingClient, Bridge, BridgeConfig};
use yuebing::store::Options;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bridge = Bridge::new(BridgeConfig::default())?;
    let client = BlockingClient::start(&bridge, common::config("blocking_store"))?;
    let opts = Options::default();
    let objects = common::objects();

    // Each call blocks its thread until it ends; any number of threads may share `client`.
    std::thread::scope(|s| {
        let (client, opts) = (&client, &opts);
        let puts: Vec<_> = objects
            .iter()
            .map(|(key, value)| s.spawn(move || client.put(key, value, opts)))
            .collect();
        puts.into_iter()
            .try_for_each(|put| put.join().expect("a put thread panicked"))
    })?;
    for (key, value) in &objects {
        let back = client.get(key, &opts)?;
        assert_eq!(&back, value, "{key}");
        println!("put and got back {key}: {} bytes", back.len());
    }

    // Registered memory of the client's engine: the transfer writes straight into it.
    let (key, value) = &objects[2];
    let buf = client.client().engine().allocate(value.len(), true)?;
    let size = client.get_into(key, buf.addr(), buf.len() as u64, &opts)?;
    let mut back = vec![0u8; size as usize];
    // SAFETY: `get_into` returned, so its transfer is over, and no other transfer into or out of
    // `buf` was started: nothing writes it while we read.
    unsafe { buf.read_at(0, &mut back) }?;
    assert_eq!(&back, value);
    println!("read {key} into registered memory: {size} bytes");

    for (key, _) in &objects {
        // The gets above hold read leases for a while: remove anyway (force).
        client.remove(key, true, &opts)?;
    }
    client.close(&opts)?;
    println!("removed {} objects", objects.len());
    // Returns once every call and callback of the bridge has ended.
    bridge.shutdown()?;
    Ok(())
}
