//! What recording one rpc call costs on the hot path, for each metrics library issue 28 weighs
//! against today's [`yuebing_rpc::Metrics`].
//!
//! Per call every variant records the same three things: one more call, the in-flight gauge up
//! and down, and the call's latency in a histogram with the bounds of
//! [`yuebing_rpc::LATENCY_BUCKETS_US`]. The latencies cycle through 64 values from 20 µs to
//! 50 ms. Threads call in a closed loop for `--duration-ms`; ns/op is wall time divided by the
//! calls all threads made (the inverse of the throughput), so on a machine with fewer cores than
//! threads it includes waiting for a core.
//!
//! Variants:
//! - `yuebing-rpc Metrics`: today's path, `Metrics::observe` (a global map under a mutex looked
//!   up per call; atomics for calls and in flight; an HDR histogram under the method's mutex).
//!   It reads the clock twice per call (once to turn the duration into a start, once to measure
//!   it), which the others, handed the duration, do not; the table's header says what a read
//!   costs here.
//! - `metrics handles`: `metrics` handles registered once on a `metrics-exporter-prometheus`
//!   recorder (not installed globally), with its upkeep run every 100 ms from a side thread as
//!   the exporter would.
//! - `metrics handles, looked up per call`: the same through `counter!`/`gauge!`/`histogram!`
//!   with a `method` label, that is a registry look-up per metric per call.
//! - `prometheus-client`: `Family` handles cloned out of `get_or_create` once.
//! - `noop`: the handles of `metrics`' `NoopRecorder`, the cost of metrics switched off.
//!
//! After each 16-method run it also times rendering the exposition a scrape would get, for the
//! variants that have one (samples still queued are drained first, untimed).
//!
//! Run: `cargo run --release -p yuebing-rpc --example metrics_cost -- [--repeat N]
//! [--duration-ms N] [--json PATH]`. With `--exposition metrics|prometheus-client` it prints a
//! small exposition (a counter and a histogram) instead, to pipe into `promtool check metrics`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, NoopRecorder, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use prometheus_client::metrics::counter::Counter as PcCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PcGauge;
use prometheus_client::metrics::histogram::Histogram as PcHistogram;
use prometheus_client::registry::Registry;
use yuebing_rpc::{Metrics, LATENCY_BUCKETS_US};

/// The method names the threads record under (thread `t` uses `METHODS[t % methods]`).
const METHODS: [&str; 16] = [
    "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11", "m12", "m13", "m14",
    "m15",
];
const BASELINE: &str = "yuebing-rpc Metrics";
/// The workloads: (case, threads, methods).
const CASES: [(&str, usize, usize); 3] = [
    ("record one call, 1 thread", 1, 1),
    ("record one call, 16 threads", 16, 1),
    ("record one call, 16 threads, 16 methods", 16, 16),
];

/// One way of recording a finished rpc call.
trait Sink: Sync {
    /// Records a finished call to `METHODS[method]` that took `took`.
    fn record(&self, method: usize, took: Duration);
    /// The text a scrape would get, where the variant has one.
    fn render(&self) -> Option<String> {
        None
    }
    /// Folds samples still queued into the histograms (before timing `render`).
    fn settle(&self) {}
}

impl Sink for Metrics {
    fn record(&self, method: usize, took: Duration) {
        self.observe(METHODS[method], took, None);
    }
}

/// The three handles of one method, as `metrics` hands them out.
struct Handles {
    calls: Counter,
    in_flight: Gauge,
    latency: Histogram,
}

/// The histogram bounds of `yuebing_rpc::LATENCY_BUCKETS_US`, in seconds.
fn bounds_s() -> Vec<f64> {
    LATENCY_BUCKETS_US
        .iter()
        .map(|&us| us as f64 / 1e6)
        .collect()
}

/// A `metrics-exporter-prometheus` recorder with our histogram bounds (not installed globally).
fn prometheus_recorder() -> PrometheusRecorder {
    PrometheusBuilder::new()
        .set_buckets(&bounds_s())
        .expect("the bounds are not empty")
        .build_recorder()
}

/// Runs the exporter's upkeep (draining histogram samples into buckets) every 100 ms until
/// dropped, as the exporter's own listener would.
struct Upkeep {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Upkeep {
    fn start(handle: PrometheusHandle) -> Upkeep {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(100))
            {
                handle.run_upkeep();
            }
        });
        Upkeep {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `metrics` handles registered once per method on `recorder`.
struct CachedHandles {
    per_method: Vec<Handles>,
    exporter: Option<(PrometheusHandle, Upkeep)>,
}

impl CachedHandles {
    fn register(recorder: &dyn Recorder) -> Vec<Handles> {
        let meta = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));
        let key = |name: &'static str, m: &'static str| {
            Key::from_parts(name, vec![Label::new("method", m)])
        };
        METHODS
            .iter()
            .map(|&m| Handles {
                calls: recorder.register_counter(&key("rpc_calls_total", m), &meta),
                in_flight: recorder.register_gauge(&key("rpc_in_flight", m), &meta),
                latency: recorder.register_histogram(&key("rpc_latency_seconds", m), &meta),
            })
            .collect()
    }

    fn prometheus() -> CachedHandles {
        let recorder = prometheus_recorder();
        let handle = recorder.handle();
        CachedHandles {
            per_method: Self::register(&recorder),
            exporter: Some((handle.clone(), Upkeep::start(handle))),
        }
    }

    fn noop() -> CachedHandles {
        CachedHandles {
            per_method: Self::register(&NoopRecorder),
            exporter: None,
        }
    }
}

impl Sink for CachedHandles {
    fn record(&self, method: usize, took: Duration) {
        let h = &self.per_method[method];
        h.in_flight.increment(1.0);
        h.calls.increment(1);
        h.in_flight.decrement(1.0);
        h.latency.record(took.as_secs_f64());
    }

    fn render(&self) -> Option<String> {
        self.exporter.as_ref().map(|(h, _)| h.render())
    }

    fn settle(&self) {
        if let Some((h, _)) = &self.exporter {
            h.run_upkeep();
        }
    }
}

/// The `metrics` macros with a label, looked up in `recorder` on every call.
struct LookedUp {
    recorder: PrometheusRecorder,
    _upkeep: Upkeep,
}

impl Sink for LookedUp {
    fn record(&self, method: usize, took: Duration) {
        let m = METHODS[method];
        metrics::with_local_recorder(&self.recorder, || {
            // The in-flight gauge is looked up once, when the call starts, and kept to its end.
            let in_flight = metrics::gauge!("rpc_in_flight", "method" => m);
            in_flight.increment(1.0);
            metrics::counter!("rpc_calls_total", "method" => m).increment(1);
            in_flight.decrement(1.0);
            metrics::histogram!("rpc_latency_seconds", "method" => m).record(took.as_secs_f64());
        });
    }
}

/// The label set of the `prometheus-client` families.
type MethodLabel = [(&'static str, &'static str); 1];

/// `prometheus-client` families in a registry, and each method's metrics cloned out of them.
struct PromClient {
    registry: Registry,
    per_method: Vec<(PcCounter, PcGauge, PcHistogram)>,
}

impl PromClient {
    /// Families holding the first `methods` of `METHODS`.
    fn new(methods: usize) -> PromClient {
        let calls = Family::<MethodLabel, PcCounter>::default();
        let in_flight = Family::<MethodLabel, PcGauge>::default();
        let latency = Family::<MethodLabel, PcHistogram, _>::new_with_constructor(|| {
            PcHistogram::new(bounds_s())
        });
        let mut registry = Registry::default();
        registry.register("rpc_calls", "Calls finished", calls.clone());
        registry.register("rpc_in_flight", "Calls running", in_flight.clone());
        registry.register("rpc_latency_seconds", "Call latency", latency.clone());
        let per_method = METHODS[..methods]
            .iter()
            .map(|&m| {
                let l = [("method", m)];
                (
                    calls.get_or_create_owned(&l),
                    in_flight.get_or_create_owned(&l),
                    latency.get_or_create_owned(&l),
                )
            })
            .collect();
        PromClient {
            registry,
            per_method,
        }
    }
}

impl Sink for PromClient {
    fn record(&self, method: usize, took: Duration) {
        let (calls, in_flight, latency) = &self.per_method[method];
        in_flight.inc();
        calls.inc();
        in_flight.dec();
        latency.observe(took.as_secs_f64());
    }

    fn render(&self) -> Option<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        Some(text)
    }
}

/// The variants, in the table's order.
const VARIANTS: [&str; 5] = [
    BASELINE,
    "metrics handles",
    "metrics handles, looked up per call",
    "prometheus-client",
    "noop",
];

/// Measures `variant` on a fresh registry: ns per recorded call, and µs to render the final
/// exposition where it has one.
fn measure_variant(
    variant: &str,
    threads: usize,
    methods: usize,
    time: Duration,
) -> (f64, Option<f64>) {
    match variant {
        BASELINE => measure(&Metrics::default(), threads, methods, time),
        "metrics handles" => measure(&CachedHandles::prometheus(), threads, methods, time),
        "metrics handles, looked up per call" => {
            let recorder = prometheus_recorder();
            let upkeep = Upkeep::start(recorder.handle());
            let sink = LookedUp {
                recorder,
                _upkeep: upkeep,
            };
            measure(&sink, threads, methods, time)
        }
        "prometheus-client" => measure(&PromClient::new(METHODS.len()), threads, methods, time),
        "noop" => measure(&CachedHandles::noop(), threads, methods, time),
        other => unreachable!("unknown variant {other}"),
    }
}

/// `threads` threads record calls on `sink` in a closed loop for `time` (after a warm-up of a
/// fifth of that); returns ns per call and µs per render of the final exposition.
fn measure<S: Sink>(
    sink: &S,
    threads: usize,
    methods: usize,
    time: Duration,
) -> (f64, Option<f64>) {
    let latencies: Vec<Duration> = (0..64)
        .map(|i| Duration::from_secs_f64(20e-6 * 2500f64.powf(f64::from(i) / 63.0)))
        .collect();
    let run = |time: Duration| {
        let start = Barrier::new(threads + 1);
        let stop = AtomicBool::new(false);
        let calls = AtomicU64::new(0);
        let began = thread::scope(|s| {
            for t in 0..threads {
                let (start, stop, calls, latencies) = (&start, &stop, &calls, &latencies);
                s.spawn(move || {
                    let method = t % methods;
                    let mut i = t * 7;
                    let mut n = 0u64;
                    start.wait();
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            sink.record(method, latencies[i % 64]);
                            i += 1;
                        }
                        n += 256;
                    }
                    calls.fetch_add(n, Ordering::Relaxed);
                });
            }
            start.wait();
            let began = Instant::now();
            thread::sleep(time);
            stop.store(true, Ordering::Relaxed);
            began
        });
        began.elapsed().as_nanos() as f64 / calls.load(Ordering::Relaxed) as f64
    };
    run(time / 5);
    let ns = run(time);
    // The samples of the last upkeep period are drained first, untimed: at this bench's rate
    // (tens of millions a second, against a real process's thousands) their drain, which a
    // render otherwise does, would swamp the formatting it measures.
    sink.settle();
    let render_us = {
        let began = Instant::now();
        sink.render().map(|text| {
            std::hint::black_box(text);
            began.elapsed().as_secs_f64() * 1e6
        })
    };
    (ns, render_us)
}

/// Median and spread (max − min) of `xs`.
fn median_spread(xs: &mut [f64]) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[xs.len() - 1] - xs[0])
}

/// What one `Instant::now()` costs here, in ns.
fn clock_read_ns() -> f64 {
    let n = 1_000_000;
    let began = Instant::now();
    for _ in 0..n {
        std::hint::black_box(Instant::now());
    }
    began.elapsed().as_nanos() as f64 / f64::from(n)
}

/// A small exposition, a labelled counter and histogram, from `library`, for
/// `promtool check metrics`.
fn exposition(library: &str) -> String {
    match library {
        "metrics" => {
            let recorder = prometheus_recorder();
            metrics::with_local_recorder(&recorder, || {
                metrics::describe_counter!("rpc_calls_total", "Calls finished");
                metrics::describe_histogram!(
                    "rpc_latency_seconds",
                    metrics::Unit::Seconds,
                    "Call latency"
                );
                metrics::counter!("rpc_calls_total", "method" => "get").increment(3);
                for s in [0.00002, 0.003, 0.7] {
                    metrics::histogram!("rpc_latency_seconds", "method" => "get").record(s);
                }
            });
            let handle = recorder.handle();
            handle.run_upkeep();
            handle.render()
        }
        "prometheus-client" => {
            let client = PromClient::new(1);
            let (calls, _, latency) = &client.per_method[0];
            calls.inc_by(3);
            for s in [0.00002, 0.003, 0.7] {
                latency.observe(s);
            }
            client.render().expect("prometheus-client renders")
        }
        other => panic!("--exposition takes metrics or prometheus-client, not {other}"),
    }
}

/// The command line: `--repeat N`, `--duration-ms N`, `--json PATH`, `--exposition LIB`.
struct Args {
    repeat: usize,
    time: Duration,
    json: Option<String>,
    exposition: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        repeat: 3,
        time: Duration::from_millis(300),
        json: None,
        exposition: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--repeat" => a.repeat = value().parse().expect("--repeat takes a number"),
            "--duration-ms" => {
                a.time = Duration::from_millis(value().parse().expect("--duration-ms: a number"))
            }
            "--json" => a.json = Some(value()),
            "--exposition" => a.exposition = Some(value()),
            _ => panic!("unknown argument {flag}; see the example's documentation"),
        }
    }
    assert!(a.repeat >= 1, "--repeat must be at least 1");
    a
}

fn main() {
    let args = args();
    if let Some(library) = &args.exposition {
        print!("{}", exposition(library));
        return;
    }
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // ns[case][variant][repetition], and render µs by variant (16-method case only).
    let mut ns = vec![vec![Vec::new(); VARIANTS.len()]; CASES.len()];
    let mut render = vec![Vec::new(); VARIANTS.len()];
    // Repetitions outermost, so that every variant is interleaved with the baseline.
    for _ in 0..args.repeat {
        for (c, &(_, threads, methods)) in CASES.iter().enumerate() {
            for (v, variant) in VARIANTS.iter().enumerate() {
                let (x, r) = measure_variant(variant, threads, methods, args.time);
                ns[c][v].push(x);
                if let (Some(r), 16) = (r, methods) {
                    render[v].push(r);
                }
            }
        }
    }

    println!(
        "metrics_cost: ns per recorded call, median of {} x {} ms (± max-min); {cpus} cores, \
         load {:.2}; one Instant::now() = {:.1} ns (the baseline reads it twice per call)",
        args.repeat,
        args.time.as_millis(),
        load(),
        clock_read_ns()
    );
    let mut rows = Vec::new();
    let mut header = format!("{:<37}", "variant");
    for (case, _, _) in CASES {
        header += &format!("  {:>29}", case.trim_start_matches("record one call, "));
    }
    println!("{header}");
    for (v, variant) in VARIANTS.iter().enumerate() {
        let mut line = format!("{variant:<37}");
        for (c, (case, _, _)) in CASES.iter().enumerate() {
            let (value, spread) = median_spread(&mut ns[c][v]);
            let base = median_spread(&mut ns[c][0]).0;
            line += &format!("  {value:>9.1} ±{spread:<7.1} {:>6.2}x", value / base);
            let mut row = serde_json::json!({"case": case, "variant": variant, "metric": "ns/op",
                "value": value, "spread": spread});
            if v > 0 {
                row["baseline"] = BASELINE.into();
                row["baseline_value"] = base.into();
                row["ratio"] = (value / base).into();
            }
            rows.push(row);
        }
        println!("{line}");
    }
    for (v, variant) in VARIANTS.iter().enumerate() {
        if render[v].is_empty() {
            continue;
        }
        let (value, spread) = median_spread(&mut render[v]);
        println!("render the exposition of 16 methods, {variant}: {value:.1} µs ±{spread:.1}");
        rows.push(serde_json::json!({"case": "render exposition, 16 methods",
            "variant": variant, "metric": "us", "value": value, "spread": spread}));
    }
    if let Some(path) = args.json {
        let doc = serde_json::json!({"bench": "metrics_cost", "version": env!("CARGO_PKG_VERSION"),
            "host": {"cpus": cpus, "loadavg_1m": load()}, "rows": rows});
        let text = serde_json::to_string_pretty(&doc).expect("JSON values serialize");
        std::fs::write(&path, text + "\n").unwrap_or_else(|e| panic!("writing {path}: {e}"));
        println!("wrote {path}");
    }
}
