//! Batches of transfer requests: checked ids and the task status machine.

pub(crate) mod driver;
mod id;
mod table;

pub use id::BatchId;
pub use table::{BatchStatus, BatchTable, Effect, TaskState, TaskStatus};
