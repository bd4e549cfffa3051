//! The Transfer Engine in one process: registered memory, a batch of one write to the
//! engine's own segment (the `local` transport), and the status it ends with.
//!
//! ```sh
//! cargo run --example engine_write_read
//! ```

use yuebing::engine::{EngineConfig, TaskState, TransferEngine, TransferRequest};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = TransferEngine::start(EngineConfig::default()).await?;
    let src = engine.allocate(1 << 20, true)?;
    let dst = engine.allocate(1 << 20, true)?;
    // SAFETY: no transfer touches `src` yet, and no peer knows its address.
    unsafe { src.write_at(0, b"hello, mooncake") }?;

    let batch = engine.allocate_batch(1)?;
    let own = engine.own_segment();
    engine.submit(
        batch,
        &[TransferRequest::write(src.addr(), own, dst.addr(), 15)],
    )?;
    let status = engine.wait(batch).await?;
    engine.free_batch(batch)?;
    assert_eq!(status.state, TaskState::Completed);

    let mut back = [0u8; 15];
    // SAFETY: the batch that wrote `dst` is final, and no peer knows its address.
    unsafe { dst.read_at(0, &mut back) }?;
    println!("{:?}: {}", status.state, String::from_utf8_lossy(&back));
    Ok(())
}
