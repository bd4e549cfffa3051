//! What the engine moved: transfers, bytes and failures per transport and direction, and the
//! transfers under way, exported to the engine's [`MetricsSink`] as `yuebing_engine_*`
//! families labelled by transport and opcode. The handles are registered once, when the engine
//! is built; a transfer costs a few atomic operations on them.

use yuebing_rpc::{label, MetricKind, MetricsSink};

use crate::request::{Opcode, TransportKind};

const KINDS: [TransportKind; 3] = [TransportKind::Local, TransportKind::Shm, TransportKind::Tcp];
const OPCODES: [Opcode; 2] = [Opcode::Read, Opcode::Write];

const TRANSFERS: &str = "yuebing_engine_transfers_total";
const BYTES: &str = "yuebing_engine_bytes_total";
const FAILURES: &str = "yuebing_engine_failures_total";
const IN_FLIGHT: &str = "yuebing_engine_transfers_in_flight";

/// The handles of one transport and direction.
struct Cell {
    transfers: metrics::Counter,
    bytes: metrics::Counter,
    in_flight: metrics::Gauge,
    /// The labels of this cell, for a failure's counter (rare: registered when one happens).
    labels: [metrics::Label; 2],
}

/// The engine's counters, one cell per transport and direction.
pub(crate) struct Counters {
    sink: MetricsSink,
    cells: [[Cell; 2]; 3],
}

fn opcode_name(opcode: Opcode) -> &'static str {
    match opcode {
        Opcode::Read => "read",
        Opcode::Write => "write",
    }
}

impl Counters {
    /// Registers the engine's families on `sink`.
    pub(crate) fn new(sink: MetricsSink) -> Self {
        sink.describe(
            MetricKind::Counter,
            TRANSFERS,
            "Transfer attempts this engine made that ended (completed or failed), by transport and direction.",
        );
        sink.describe(
            MetricKind::Counter,
            BYTES,
            "Bytes of the transfers that completed.",
        );
        sink.describe(
            MetricKind::Counter,
            FAILURES,
            "Transfer attempts that failed, by error code.",
        );
        sink.describe(MetricKind::Gauge, IN_FLIGHT, "Transfers under way now.");
        let cell = |kind: TransportKind, opcode: Opcode| {
            let labels = [
                label("transport", kind.name()),
                label("opcode", opcode_name(opcode)),
            ];
            Cell {
                transfers: sink.counter(TRANSFERS, labels.to_vec()),
                bytes: sink.counter(BYTES, labels.to_vec()),
                in_flight: sink.gauge(IN_FLIGHT, labels.to_vec()),
                labels,
            }
        };
        let cells = KINDS.map(|kind| OPCODES.map(|opcode| cell(kind, opcode)));
        Counters { sink, cells }
    }

    fn cell(&self, kind: TransportKind, opcode: Opcode) -> &Cell {
        let k = KINDS.iter().position(|&k| k == kind).unwrap_or(0);
        let o = OPCODES.iter().position(|&o| o == opcode).unwrap_or(0);
        &self.cells[k][o]
    }

    /// A transfer of `kind` and `opcode` starts; counted when the guard drops with its outcome.
    pub(crate) fn start(&self, kind: TransportKind, opcode: Opcode, len: u64) -> Counting<'_> {
        let cell = self.cell(kind, opcode);
        cell.in_flight.increment(1.0);
        Counting {
            counters: self,
            cell,
            len,
            failed: Some(crate::error::Error::Canceled.code()),
        }
    }
}

/// One transfer being counted (see [`Counters::start`]).
pub(crate) struct Counting<'a> {
    counters: &'a Counters,
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
        c.in_flight.decrement(1.0);
        c.transfers.increment(1);
        match self.failed {
            None => c.bytes.increment(self.len),
            Some(code) => {
                let mut labels = c.labels.to_vec();
                labels.push(label("code", code.to_string()));
                self.counters.sink.counter(FAILURES, labels).increment(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn transfers_are_counted_by_transport_direction_and_outcome() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let c = Counters::new(MetricsSink::new(Arc::new(recorder)));
        let mut ok = c.start(TransportKind::Tcp, Opcode::Write, 100);
        let mut bad = c.start(TransportKind::Tcp, Opcode::Write, 50);
        let gone = c.start(TransportKind::Shm, Opcode::Read, 7);
        let tcp_write = r#"{transport="tcp",opcode="write"}"#;
        let text = handle.render();
        assert!(
            text.contains(&format!("{IN_FLIGHT}{tcp_write} 2\n")),
            "{text}"
        );
        ok.set(&Ok(()));
        bad.set(&Err(crate::error::Error::Timeout));
        drop((ok, bad, gone));
        let text = handle.render();
        let shm_read = r#"{transport="shm",opcode="read"}"#;
        for line in [
            format!("{TRANSFERS}{tcp_write} 2\n"),
            format!("{BYTES}{tcp_write} 100\n"),
            format!("{IN_FLIGHT}{tcp_write} 0\n"),
            format!(r#"{FAILURES}{{transport="tcp",opcode="write",code="-3500"}} 1"#),
            format!("{TRANSFERS}{shm_read} 1\n"),
            format!("{BYTES}{shm_read} 0\n"),
            // Dropped unfinished: canceled.
            format!(r#"{FAILURES}{{transport="shm",opcode="read",code="-3501"}} 1"#),
            format!("# HELP {IN_FLIGHT} Transfers under way now.\n"),
        ] {
            assert!(text.contains(&line), "{line:?} missing from\n{text}");
        }
        // Every transport and direction is there from the start.
        assert_eq!(text.matches(TRANSFERS).count(), 2 + 6, "{text}");
    }
}
