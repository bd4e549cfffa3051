//! The process's own gauges, read when metrics are rendered: resident memory and open file
//! descriptors (sockets included), from `/proc/self`. Where `/proc` cannot be read they are
//! left as they were.

use yuebing_rpc::{MetricKind, MetricsSink};

const RSS: &str = "yuebing_process_resident_memory_bytes";
const FDS: &str = "yuebing_process_open_fds";

/// The gauges of this process on one sink.
pub(crate) struct ProcessGauges {
    rss: metrics::Gauge,
    fds: metrics::Gauge,
}

impl ProcessGauges {
    pub(crate) fn new(sink: &MetricsSink) -> Self {
        sink.describe(MetricKind::Gauge, RSS, "Resident memory of this process.");
        sink.describe(
            MetricKind::Gauge,
            FDS,
            "Open file descriptors of this process (files, sockets, memory maps' fds).",
        );
        ProcessGauges {
            rss: sink.gauge(RSS, vec![]),
            fds: sink.gauge(FDS, vec![]),
        }
    }

    /// Reads the process's values now.
    pub(crate) fn update(&self) {
        if let Some(bytes) = resident_bytes() {
            self.rss.set(bytes as f64);
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            self.fds.set(dir.count() as f64);
        }
    }
}

/// Resident set size: `VmRSS` of `/proc/self/status`, in kB.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_resident_memory() {
        assert!(resident_bytes().is_some_and(|b| b > 1 << 20));
    }
}
