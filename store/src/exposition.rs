//! Prometheus' text exposition format (version 0.0.4), written by hand: plain rows of the
//! master's and clients' counts, and the rpc layer's per-method statistics as families of
//! counters, gauges and histograms. `yuebing_` names, base units (bytes, seconds), `_total`
//! counters: what `promtool check metrics` asks of an exposition.

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

/// The rpc calls of `methods` (one `side`: `server` or `client`) in Prometheus' text format:
/// calls and errors by code as counters, calls in flight as a gauge, latency as a histogram
/// in seconds; labelled by service and method (`MasterService.put_start` is service
/// `MasterService`, method `put_start`; a method named without its service is `service`'s).
pub(crate) fn rpc_families(methods: &[MethodMetrics], side: &str, service: &str) -> String {
    use std::fmt::Write;
    let name = |what: &str| format!("yuebing_rpc_{side}_{what}");
    let mut out = String::new();
    let mut family = |what: &str, kind: &str, help: &str, lines: &mut dyn FnMut(&mut String)| {
        let n = name(what);
        let _ = write!(out, "# HELP {n} {help}\n# TYPE {n} {kind}\n");
        lines(&mut out);
    };
    let labels = |m: &MethodMetrics| {
        let (service, method) = m.method.split_once('.').unwrap_or((service, &m.method));
        format!(
            "service=\"{}\",method=\"{}\"",
            escape(service),
            escape(method)
        )
    };
    let calls = name("calls_total");
    family(
        "calls_total",
        "counter",
        "Calls finished, by service and method.",
        &mut |o| {
            for m in methods {
                let _ = writeln!(o, "{calls}{{{}}} {}", labels(m), m.calls);
            }
        },
    );
    let errors = name("errors_total");
    family(
        "errors_total",
        "counter",
        "Calls that failed, by error code.",
        &mut |o| {
            for m in methods {
                for (code, n) in &m.errors {
                    let _ = writeln!(o, "{errors}{{{},code=\"{code}\"}} {n}", labels(m));
                }
            }
        },
    );
    let flight = name("in_flight");
    family("in_flight", "gauge", "Calls running now.", &mut |o| {
        for m in methods {
            let _ = writeln!(o, "{flight}{{{}}} {}", labels(m), m.in_flight);
        }
    });
    let latency = name("latency_seconds");
    family(
        "latency_seconds",
        "histogram",
        "How long calls took.",
        &mut |o| {
            for m in methods {
                let l = labels(m);
                for (le, n) in LATENCY_BUCKETS_US.iter().zip(&m.buckets) {
                    let le = *le as f64 / 1e6;
                    let _ = writeln!(o, "{latency}_bucket{{{l},le=\"{le}\"}} {n}");
                }
                let _ = writeln!(o, "{latency}_bucket{{{l},le=\"+Inf\"}} {}", m.calls);
                let _ = writeln!(o, "{latency}_sum{{{l}}} {}", m.sum_us as f64 / 1e6);
                let _ = writeln!(o, "{latency}_count{{{l}}} {}", m.calls);
            }
        },
    );
    out
}

/// A label value escaped as Prometheus' text format wants (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
