//! Prometheus' text exposition format (version 0.0.4), written by hand: plain rows of the
//! master's and clients' counts, and the rpc layer's per-method statistics as families of
//! counters, gauges and histograms. `yuebing_` names, base units (bytes, seconds), `_total`
//! counters: what `promtool check metrics` asks of an exposition.

use std::fmt::Write;

use yuebing_engine::{Opcode, TransferCounts};
use yuebing_rpc::{MethodMetrics, LATENCY_BUCKETS_US};

/// One metric: its name, kind (`gauge`, `counter`), help text and value.
pub(crate) type Row = (&'static str, &'static str, &'static str, u64);

/// The rows in Prometheus' text format.
pub(crate) fn rows(rows: &[Row]) -> String {
    rows.iter()
        .map(|(name, kind, help, value)| {
            format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n")
        })
        .collect()
}

/// One family's header: its help text and type.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

/// A labelled family of plain samples (a counter or a gauge): one line per `(labels, value)`.
fn family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, u64)>,
) {
    header(out, name, kind, help);
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// The rpc calls of `methods` (one `side`: `server` or `client`) in Prometheus' text format:
/// calls and errors by code as counters, calls in flight as a gauge, latency as a histogram
/// in seconds; labelled by service and method (`MasterService.put_start` is service
/// `MasterService`, method `put_start`; a method named without its service is `service`'s).
pub(crate) fn rpc_families(methods: &[MethodMetrics], side: &str, service: &str) -> String {
    let name = |what: &str| format!("yuebing_rpc_{side}_{what}");
    let labels = |m: &MethodMetrics| {
        let (service, method) = m.method.split_once('.').unwrap_or((service, &m.method));
        format!(
            "service=\"{}\",method=\"{}\"",
            escape(service),
            escape(method)
        )
    };
    let mut out = String::new();
    family(
        &mut out,
        &name("calls_total"),
        "counter",
        "Calls finished, by service and method.",
        methods.iter().map(|m| (labels(m), m.calls)),
    );
    family(
        &mut out,
        &name("errors_total"),
        "counter",
        "Calls that failed as a whole, by error code (a server counts a store error in its reply too).",
        methods.iter().flat_map(|m| {
            let l = labels(m);
            m.errors
                .iter()
                .map(move |(code, n)| (format!("{l},code=\"{code}\""), *n))
        }),
    );
    family(
        &mut out,
        &name("in_flight"),
        "gauge",
        "Calls running now.",
        methods.iter().map(|m| (labels(m), m.in_flight)),
    );
    histogram(
        &mut out,
        &name("latency_seconds"),
        "How long calls took.",
        methods.iter().map(|m| (labels(m), m)),
    );
    out
}

/// A histogram family in seconds from timing statistics: one series per `(labels, stats)`
/// (labels may be empty), its buckets those of [`LATENCY_BUCKETS_US`].
pub(crate) fn histogram<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (String, &'a MethodMetrics)>,
) {
    header(out, name, "histogram", help);
    for (l, m) in series {
        let sep = if l.is_empty() { "" } else { "," };
        for (le, n) in LATENCY_BUCKETS_US.iter().zip(&m.buckets) {
            let le = *le as f64 / 1e6;
            let _ = writeln!(out, "{name}_bucket{{{l}{sep}le=\"{le}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{{l}{sep}le=\"+Inf\"}} {}", m.calls);
        let braced = if l.is_empty() {
            l.clone()
        } else {
            format!("{{{l}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", m.sum_us as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{braced} {}", m.calls);
    }
}

/// What an engine moved (`counts`, one entry per transport and direction) in Prometheus' text
/// format: transfers, bytes and failures by code as counters, transfers under way as a gauge;
/// labelled by transport and opcode.
pub(crate) fn engine_families(counts: &[TransferCounts]) -> String {
    let labels = |c: &TransferCounts| {
        let opcode = match c.opcode {
            Opcode::Read => "read",
            Opcode::Write => "write",
        };
        format!("transport=\"{}\",opcode=\"{opcode}\"", c.transport.name())
    };
    let mut out = String::new();
    family(
        &mut out,
        "yuebing_engine_transfers_total",
        "counter",
        "Transfer attempts this engine made that ended (completed or failed), by transport and direction.",
        counts.iter().map(|c| (labels(c), c.transfers)),
    );
    family(
        &mut out,
        "yuebing_engine_bytes_total",
        "counter",
        "Bytes of the transfers that completed.",
        counts.iter().map(|c| (labels(c), c.bytes)),
    );
    family(
        &mut out,
        "yuebing_engine_failures_total",
        "counter",
        "Transfer attempts that failed, by error code.",
        counts.iter().flat_map(|c| {
            let l = labels(c);
            c.failures
                .iter()
                .map(move |(code, n)| (format!("{l},code=\"{code}\""), *n))
        }),
    );
    family(
        &mut out,
        "yuebing_engine_transfers_in_flight",
        "gauge",
        "Transfers under way now.",
        counts.iter().map(|c| (labels(c), c.in_flight)),
    );
    out
}

/// A label value escaped as Prometheus' text format wants (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
