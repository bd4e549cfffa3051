//! What the engine moved: transfers, bytes and failures per transport and direction, and the
//! transfers under way, as relaxed atomic counters (a few additions per transfer, no lock);
//! read with [`TransferEngine::transfer_counts`](crate::TransferEngine::transfer_counts).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::request::{Opcode, TransportKind};

const KINDS: [TransportKind; 3] = [TransportKind::Local, TransportKind::Shm, TransportKind::Tcp];
const OPCODES: [Opcode; 2] = [Opcode::Read, Opcode::Write];

/// The counters of one transport and direction.
#[derive(Debug, Default)]
struct Cell {
    transfers: AtomicU64,
    bytes: AtomicU64,
    in_flight: AtomicU64,
    /// Failed transfers by error code (rare: behind a lock).
    failures: Mutex<BTreeMap<i32, u64>>,
}

/// The engine's counters, one cell per transport and direction.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    cells: [[Cell; 2]; 3],
}

fn kind_index(kind: TransportKind) -> usize {
    match kind {
        TransportKind::Local => 0,
        TransportKind::Shm => 1,
        TransportKind::Tcp => 2,
    }
}

fn opcode_index(opcode: Opcode) -> usize {
    match opcode {
        Opcode::Read => 0,
        Opcode::Write => 1,
    }
}

impl Counters {
    fn cell(&self, kind: TransportKind, opcode: Opcode) -> &Cell {
        &self.cells[kind_index(kind)][opcode_index(opcode)]
    }

    /// A transfer of `kind` and `opcode` starts; counted when the guard drops with its outcome.
    pub(crate) fn start(&self, kind: TransportKind, opcode: Opcode, len: u64) -> Counting<'_> {
        let cell = self.cell(kind, opcode);
        cell.in_flight.fetch_add(1, Ordering::Relaxed);
        Counting {
            cell,
            len,
            failed: Some(crate::error::Error::Canceled.code()),
        }
    }

    /// A copy of every counter, one entry per transport and direction.
    pub(crate) fn snapshot(&self) -> Vec<TransferCounts> {
        let mut out = Vec::with_capacity(KINDS.len() * OPCODES.len());
        for kind in KINDS {
            for opcode in OPCODES {
                let c = self.cell(kind, opcode);
                out.push(TransferCounts {
                    transport: kind,
                    opcode,
                    transfers: c.transfers.load(Ordering::Relaxed),
                    bytes: c.bytes.load(Ordering::Relaxed),
                    in_flight: c.in_flight.load(Ordering::Relaxed),
                    failures: c.failures.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                });
            }
        }
        out
    }
}

/// One transfer being counted (see [`Counters::start`]).
pub(crate) struct Counting<'a> {
    cell: &'a Cell,
    len: u64,
    /// The error code it ends with; a transfer dropped unfinished counts as canceled.
    failed: Option<i32>,
}

impl Counting<'_> {
    /// Records the outcome.
    pub(crate) fn set(&mut self, outcome: &Result<(), crate::error::Error>) {
        self.failed = outcome.as_ref().err().map(crate::error::Error::code);
    }
}

impl Drop for Counting<'_> {
    fn drop(&mut self) {
        let c = self.cell;
        c.in_flight.fetch_sub(1, Ordering::Relaxed);
        c.transfers.fetch_add(1, Ordering::Relaxed);
        match self.failed {
            None => {
                c.bytes.fetch_add(self.len, Ordering::Relaxed);
            }
            Some(code) => {
                let mut f = c.failures.lock().unwrap_or_else(|p| p.into_inner());
                *f.entry(code).or_default() += 1;
            }
        }
    }
}

/// What one transport moved in one direction since the engine started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferCounts {
    /// The transport.
    pub transport: TransportKind,
    /// Read or write.
    pub opcode: Opcode,
    /// Transfers ended (completed or failed).
    pub transfers: u64,
    /// Bytes of the transfers that completed.
    pub bytes: u64,
    /// Transfers under way now.
    pub in_flight: u64,
    /// Failed transfers by error code.
    pub failures: BTreeMap<i32, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_are_counted_by_transport_direction_and_outcome() {
        let c = Counters::default();
        let mut ok = c.start(TransportKind::Tcp, Opcode::Write, 100);
        let mut bad = c.start(TransportKind::Tcp, Opcode::Write, 50);
        let gone = c.start(TransportKind::Shm, Opcode::Read, 7);
        let tcp_write = |c: &Counters| {
            c.snapshot()
                .into_iter()
                .find(|t| t.transport == TransportKind::Tcp && t.opcode == Opcode::Write)
                .unwrap()
        };
        assert_eq!(tcp_write(&c).in_flight, 2);
        ok.set(&Ok(()));
        bad.set(&Err(crate::error::Error::Timeout));
        drop((ok, bad, gone));
        let t = tcp_write(&c);
        assert_eq!((t.transfers, t.bytes, t.in_flight), (2, 100, 0));
        assert_eq!(t.failures, BTreeMap::from([(-3500, 1)]));
        let shm = c
            .snapshot()
            .into_iter()
            .find(|t| t.transport == TransportKind::Shm && t.opcode == Opcode::Read)
            .unwrap();
        assert_eq!((shm.transfers, shm.bytes), (1, 0));
        assert_eq!(
            shm.failures,
            BTreeMap::from([(-3501, 1)]),
            "dropped: canceled"
        );
        assert_eq!(c.snapshot().len(), 6);
    }
}
