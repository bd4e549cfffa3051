//! The store from async Rust: connect to a running master, put three objects, get them back,
//! read one into registered memory without a copy (`get_into`), remove them.
//! `blocking_store` and `callback_store` do the same through the bridge.
//!
//! ```sh
//! cargo run -- master &                               # a master on 127.0.0.1:50051
//! cargo run --example async_store -- 127.0.0.1:50051  # or YUEBING_MASTERS=127.0.0.1:50051
//! ```

mod common;

use yuebing::store::{Client, Options};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::start(common::config("async_store")).await?;
    let opts = Options::default();
    let objects = common::objects();

    for (key, value) in &objects {
        client.put(key, value, &opts).await?;
    }
    for (key, value) in &objects {
        let back = client.get(key, &opts).await?;
        assert_eq!(&back, value, "{key}");
        println!("put and got back {key}: {} bytes", back.len());
    }

    // Registered memory of the client's engine: the transfer writes straight into it.
    let (key, value) = &objects[2];
    let buf = client.engine().allocate(value.len(), true)?;
    let size = client
        .get_into(key, buf.addr(), buf.len() as u64, &opts)
        .await?;
    let mut back = vec![0u8; size as usize];
    // SAFETY: `get_into` returned, so its transfer is over, and no other transfer into or out of
    // `buf` was started: nothing writes it while we read.
    unsafe { buf.read_at(0, &mut back) }?;
    assert_eq!(&back, value);
    println!("read {key} into registered memory: {size} bytes");

    for (key, _) in &objects {
        // The gets above hold read leases for a while: remove anyway (force).
        client.remove(key, true, &opts).await?;
    }
    client.close(&opts).await?;
    println!("removed {} objects", objects.len());
    Ok(())
}
