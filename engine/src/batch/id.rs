//! Batch ids that cannot dangle: a slot index plus the slot's generation.

use std::fmt;

/// Names a batch. Opaque and checked: an id whose batch was freed (or whose slot was reused)
/// is refused with [`Error::UnknownBatch`](crate::Error::UnknownBatch), never undefined behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl BatchId {
    /// The id as one number (for the C ABI and logs).
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The id from [`BatchId::to_u64`]; whether it names a live batch is checked on use.
    pub fn from_u64(v: u64) -> Self {
        BatchId {
            index: v as u32,
            generation: (v >> 32) as u32,
        }
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch#{}.{}", self.index, self.generation)
    }
}
