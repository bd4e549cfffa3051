//! What `store stats --watch` prints: a table redrawn in place on a terminal ([`table`]), or
//! one `key=value` line per sample elsewhere ([`line`]). Pure: the texts from the samples.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use yuebing_store::master::Stats;

use super::rates::Rates;

/// The methods whose calls are puts and gets (a batch counts once).
pub const PUTS: &[&str] = &["put_start", "batch_put_start"];
/// See [`PUTS`].
pub const GETS: &[&str] = &["get_replica_list", "batch_get_replica_list"];

/// A sample a master answered: its counts, and the rates since the sample before (none for
/// the first of a run).
#[derive(Debug, Clone)]
pub struct Sample {
    /// When it was taken.
    pub at: SystemTime,
    /// The master that answered.
    pub master: String,
    /// Its counts.
    pub stats: Stats,
    /// The rates since the sample before.
    pub rates: Option<Rates>,
}

/// Why a sample failed: the master asked, and the error as one line.
#[derive(Debug, Clone)]
pub struct Failure {
    /// When.
    pub at: SystemTime,
    /// The master asked (the first, where several were).
    pub master: String,
    /// The error's name and code (as `error[NAME CODE]` prints them), and its message.
    pub name: &'static str,
    /// See `name`.
    pub code: i32,
    /// See `name`.
    pub message: String,
}

impl Failure {
    /// The failure of `e` at `master`.
    pub fn of(master: String, e: &yuebing_store::Error) -> Failure {
        Failure {
            at: SystemTime::now(),
            master,
            name: crate::bridge::error::code_name(e.code()),
            code: e.code(),
            message: e.to_string(),
        }
    }
}

/// One plain line: `ts=… master=… objects=… … ops_s=… errors_s=… p99_us=… puts_s=… gets_s=…`,
/// the keys always in this order, `-` for a rate not known yet; or, for a failure,
/// `ts=… master=… error=NAME code=N message=…` (the message runs to the end of the line).
pub fn line(sample: Result<&Sample, &Failure>) -> String {
    let mut out = String::new();
    match sample {
        Ok(s) => {
            let st = &s.stats;
            let _ = write!(
                out,
                "ts={} master={} objects={} pending_writes={} segments={} nodes={} clients={} \
                 used_bytes={} capacity_bytes={} evicted={}",
                unix(s.at),
                s.master,
                st.objects,
                st.pending_writes,
                st.mounts,
                st.nodes,
                st.clients,
                st.bytes_used,
                st.bytes_capacity,
                st.evicted
            );
            let rate = |f: fn(&Rates) -> f64| {
                s.rates
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |r| format!("{:.1}", f(r)))
            };
            let p99 = s
                .rates
                .as_ref()
                .and_then(|r| r.p99_us)
                .map_or_else(|| "-".to_string(), |us| us.to_string());
            let _ = write!(
                out,
                " ops_s={} errors_s={} p99_us={p99} puts_s={} gets_s={}",
                rate(|r| r.ops),
                rate(|r| r.errors),
                rate(|r| r.calls_of(PUTS)),
                rate(|r| r.calls_of(GETS)),
            );
        }
        Err(f) => {
            let _ = write!(
                out,
                "ts={} master={} error={} code={} message={}",
                unix(f.at),
                f.master,
                f.name,
                f.code,
                f.message.replace('\n', " ")
            );
        }
    }
    out
}

/// The terminal's table: a title, the error of the last try if it failed, the counts and
/// rates of the last sample that succeeded, and the methods called in its interval.
pub fn table(last: Option<&Sample>, failure: Option<&Failure>, every: Duration) -> String {
    let mut out = String::new();
    let now = failure.map_or_else(|| last.map_or_else(SystemTime::now, |s| s.at), |f| f.at);
    let master = failure
        .map(|f| &f.master)
        .or_else(|| last.map(|s| &s.master));
    let _ = writeln!(
        out,
        "yuebing store stats: master {}, every {}, {} UTC (Ctrl-C ends)",
        master.map_or("-", |m| m.as_str()),
        seconds(every),
        clock(now)
    );
    out.push('\n');
    if let Some(f) = failure {
        let _ = writeln!(
            out,
            "error[{} {}]: {} (trying again every {})",
            f.name,
            f.code,
            f.message,
            seconds(every)
        );
        match last {
            Some(s) => {
                let _ = writeln!(out, "the figures below are from {} UTC", clock(s.at));
            }
            None => return out,
        }
        out.push('\n');
    }
    let Some(s) = last else {
        return out;
    };
    let st = &s.stats;
    let used = match st.bytes_capacity {
        0 => format!("{} of 0 B", bytes(st.bytes_used)),
        cap => format!(
            "{} of {} ({:.1}%)",
            bytes(st.bytes_used),
            bytes(cap),
            st.bytes_used as f64 * 100.0 / cap as f64
        ),
    };
    let _ = writeln!(
        out,
        "{:>8}  {:>5}  {:<28}  {:>10}  {:>7}  {:>7}  {:>8}",
        "segments", "nodes", "capacity used", "objects", "writing", "clients", "evicted"
    );
    let _ = writeln!(
        out,
        "{:>8}  {:>5}  {:<28}  {:>10}  {:>7}  {:>7}  {:>8}",
        st.mounts, st.nodes, used, st.objects, st.pending_writes, st.clients, st.evicted
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "{:<24}  {:>10}  {:>10}  {:>9}",
        "calls", "ops/s", "errors/s", "p99 <="
    );
    let Some(r) = &s.rates else {
        let _ = writeln!(
            out,
            "{:<24}  {:>10}  {:>10}  {:>9}",
            "all (from the next sample)", "-", "-", "-"
        );
        return out;
    };
    let _ = writeln!(
        out,
        "{:<24}  {:>10.1}  {:>10.1}  {:>9}",
        "all",
        r.ops,
        r.errors,
        latency(r.p99_us)
    );
    for m in &r.methods {
        let _ = writeln!(
            out,
            "  {:<22}  {:>10.1}  {:>10.1}  {:>9}",
            m.method,
            m.calls,
            m.errors,
            latency(m.p99_us)
        );
    }
    out
}

/// Seconds since the Unix epoch, with milliseconds.
fn unix(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", d.as_secs(), d.subsec_millis())
}

/// The time of day, UTC: `HH:MM:SS`.
fn clock(at: SystemTime) -> String {
    let s = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// `1s`, `0.5s`.
fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// `250us`, `2.5ms`, `1.0s`; `-` for none.
fn latency(us: Option<u64>) -> String {
    match us {
        None => "-".into(),
        Some(us) if us < 1_000 => format!("{us}us"),
        Some(us) if us < 1_000_000 => format!("{}ms", us as f64 / 1e3),
        Some(us) => format!("{}s", us as f64 / 1e6),
    }
}

/// `512 B`, `1.5 KiB`, `16.0 MiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::super::rates::MethodRate;
    use super::*;

    fn sample(rates: Option<Rates>) -> Sample {
        Sample {
            at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
            master: "127.0.0.1:50051".into(),
            stats: Stats {
                objects: 12,
                mounts: 1,
                nodes: 1,
                clients: 2,
                bytes_used: 4 << 20,
                bytes_capacity: 16 << 20,
                ..Stats::default()
            },
            rates,
        }
    }

    fn rates() -> Rates {
        Rates {
            seconds: 1.0,
            ops: 30.0,
            errors: 1.0,
            p99_us: Some(2_500),
            methods: vec![MethodRate {
                method: "put_start".into(),
                calls: 20.0,
                errors: 0.0,
                p99_us: Some(250),
            }],
        }
    }

    #[test]
    fn a_plain_line_has_every_key_in_order_and_dashes_until_rates_are_known() {
        assert_eq!(
            line(Ok(&sample(Some(rates())))),
            "ts=1700000000.250 master=127.0.0.1:50051 objects=12 pending_writes=0 segments=1 \
             nodes=1 clients=2 used_bytes=4194304 capacity_bytes=16777216 evicted=0 ops_s=30.0 \
             errors_s=1.0 p99_us=2500 puts_s=20.0 gets_s=0.0"
        );
        assert!(line(Ok(&sample(None))).ends_with(" ops_s=- errors_s=- p99_us=- puts_s=- gets_s=-"));
        let failure = Failure {
            at: UNIX_EPOCH,
            master: "127.0.0.1:9".into(),
            name: "StoreTimeout",
            code: -1501,
            message: "the call's deadline passed".into(),
        };
        assert_eq!(
            line(Err(&failure)),
            "ts=0.000 master=127.0.0.1:9 error=StoreTimeout code=-1501 message=the call's \
             deadline passed"
        );
    }

    #[test]
    fn the_table_shows_counts_rates_methods_and_an_error_above_the_last_figures() {
        let every = Duration::from_millis(500);
        let s = sample(Some(rates()));
        let t = table(Some(&s), None, every);
        assert!(t.contains("every 0.5s, 22:13:20 UTC"), "{t}");
        assert!(t.contains("4.0 MiB of 16.0 MiB (25.0%)"), "{t}");
        assert!(
            t.contains("2.5ms") && t.contains("put_start") && t.contains("250us"),
            "{t}"
        );
        let failure = Failure::of("127.0.0.1:50051".into(), &yuebing_store::Error::Timeout);
        let t = table(Some(&s), Some(&failure), every);
        assert!(t.contains("error[StoreTimeout -1501]"), "{t}");
        assert!(
            t.contains("from 22:13:20 UTC") && t.contains("put_start"),
            "{t}"
        );
        let t = table(None, Some(&failure), every);
        assert!(!t.contains("segments"), "{t}");
        let t = table(Some(&sample(None)), None, every);
        assert!(t.contains("from the next sample"), "{t}");
    }
}
