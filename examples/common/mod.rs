//! What the three store examples share: where the master is, the client's settings, and the
//! objects they store.

use std::process::exit;

use yuebing::rpc::{Endpoint, Token};
use yuebing::store::ClientConfig;

/// Bytes of store space each example's client contributes, so that a bare `yuebing master`
/// (no nodes) can hold the objects.
const STORE_SPACE: u64 = 64 << 20;

/// The client settings for the master named by the first argument, or else by
/// `YUEBING_MASTERS` (comma-separated, as the `yuebing` tool reads it), presenting
/// `YUEBING_TOKEN` if set. Without either address it prints how to run `example` and exits.
pub(crate) fn config(example: &str) -> ClientConfig {
    let given = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("YUEBING_MASTERS").ok());
    let Some(list) = given.filter(|s| !s.trim().is_empty()) else {
        eprintln!(
            "usage: {example} MASTER_ADDR   (or set YUEBING_MASTERS=MASTER_ADDR)\n\
             \n\
             Start a master first, then run the example against it:\n\
             \n    cargo run -- master &          # listens on 127.0.0.1:50051\n    \
             cargo run --example {example} -- 127.0.0.1:50051"
        );
        exit(2);
    };
    let masters = list
        .split(',')
        .map(|m| {
            m.trim().parse::<Endpoint>().unwrap_or_else(|e| {
                eprintln!("{example}: {m:?} is not a master address (host:port): {e}");
                exit(2);
            })
        })
        .collect();
    let token = std::env::var("YUEBING_TOKEN").ok().map(|t| {
        Token::new(t).unwrap_or_else(|e| {
            eprintln!("{example}: YUEBING_TOKEN: {e}");
            exit(2);
        })
    });
    ClientConfig {
        masters,
        token,
        store_size: STORE_SPACE,
        ..ClientConfig::default()
    }
}

/// Three objects (key, value) of 4 KiB, 64 KiB and 1 MiB, under keys of this process's own.
pub(crate) fn objects() -> Vec<(String, Vec<u8>)> {
    let pid = std::process::id();
    [4 << 10, 64 << 10, 1 << 20]
        .into_iter()
        .enumerate()
        .map(|(i, len)| {
            let value = (0..len).map(|b| (b % 251) as u8 ^ i as u8).collect();
            (format!("example/{pid}/{i}"), value)
        })
        .collect()
}
