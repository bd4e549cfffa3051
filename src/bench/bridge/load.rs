//! Closed loops, one per shape of caller: tasks on a runtime, plain threads, callback chains.
//! Each keeps `inflight` calls under way until a shared [`Window`] closes, and records every
//! call that started inside it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;

use crate::bench::harness::{Recorder, Sample};

/// A caller's continuation in callback mode: called once with the call's outcome.
pub(super) type Done = Box<dyn FnOnce(Result<(), String>) + Send + 'static>;

/// When a measurement counts and when it ends: calls started after the warm-up are recorded;
/// no call starts after `duration`, nor once `max_ops` calls were recorded.
pub(super) struct Window {
    start: Instant,
    end: Instant,
    max_ops: u64,
    recorded: AtomicU64,
    seq: AtomicU64,
}

/// A call under way: its number in the measurement and when it started.
pub(super) struct Started {
    seq: u64,
    t0: Instant,
}

impl Window {
    /// A window opening after `warmup` from now, for `duration` or `max_ops` recorded calls
    /// (`None`: no limit), whichever comes first.
    pub(super) fn new(warmup: Duration, duration: Duration, max_ops: Option<u64>) -> Window {
        let start = Instant::now() + warmup;
        Window {
            start,
            end: start + duration,
            max_ops: max_ops.unwrap_or(u64::MAX),
            recorded: AtomicU64::new(0),
            seq: AtomicU64::new(0),
        }
    }

    /// The next call, unless the measurement is over.
    fn begin(&self) -> Option<Started> {
        let t0 = Instant::now();
        if t0 >= self.end || self.recorded.load(Ordering::Relaxed) >= self.max_ops {
            return None;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        Some(Started { seq, t0 })
    }

    /// Records a finished call if it started inside the window.
    fn end(&self, call: Started, rec: &mut Recorder) {
        if call.t0 >= self.start {
            rec.record(call.t0, Instant::now());
            self.recorded.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// All workers' calls, over the time from the window's start to the last recorded end.
    fn sample(&self, all: &Recorder) -> Result<Sample, String> {
        match all.last() {
            Some(last) => Ok(all.sample(last.saturating_duration_since(self.start))),
            None => Err("no call finished inside the measurement: raise --duration-ms".into()),
        }
    }
}

/// `inflight` tasks on `handle`'s runtime, each awaiting `op(worker, seq)` in a loop; this
/// (plain) thread waits for them.
pub(super) fn tasks<F, Fut>(
    handle: &Handle,
    inflight: usize,
    window: Arc<Window>,
    op: F,
) -> Result<Sample, String>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let op = Arc::new(op);
    let workers: Vec<_> = (0..inflight)
        .map(|w| {
            let (op, window) = (op.clone(), window.clone());
            handle.spawn(async move {
                let mut rec = Recorder::default();
                while let Some(call) = window.begin() {
                    op(w, call.seq).await?;
                    window.end(call, &mut rec);
                }
                Ok::<_, String>(rec)
            })
        })
        .collect();
    let mut all = Recorder::default();
    handle.block_on(async {
        for w in workers {
            all.merge(&w.await.map_err(|e| format!("a bench task failed: {e}"))??);
        }
        Ok::<_, String>(())
    })?;
    window.sample(&all)
}

/// `inflight` plain OS threads, each calling `op(worker, seq)` in a loop.
pub(super) fn threads<F>(inflight: usize, window: &Window, op: F) -> Result<Sample, String>
where
    F: Fn(usize, u64) -> Result<(), String> + Sync,
{
    std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(inflight);
        for w in 0..inflight {
            let op = &op;
            let worker = std::thread::Builder::new()
                .name(format!("bench-caller-{w}"))
                .spawn_scoped(s, move || {
                    let mut rec = Recorder::default();
                    while let Some(call) = window.begin() {
                        op(w, call.seq)?;
                        window.end(call, &mut rec);
                    }
                    Ok::<_, String>(rec)
                })
                .map_err(|e| format!("cannot start a caller thread: {e}"))?;
            workers.push(worker);
        }
        let mut all = Recorder::default();
        for w in workers {
            let rec = w
                .join()
                .map_err(|_| "a caller thread panicked".to_string())??;
            all.merge(&rec);
        }
        window.sample(&all)
    })
}

/// One closed-loop chain of callback calls: what it carries from one call to the next.
struct Chain<F> {
    worker: usize,
    rec: Recorder,
    window: Arc<Window>,
    start: Arc<F>,
    out: Sender<Result<Recorder, String>>,
}

/// Starts the chain's next call, whose continuation records it and starts the one after; when
/// the window has closed (or a call failed) the chain reports instead.
fn next<F>(mut chain: Chain<F>)
where
    F: Fn(usize, u64, Done) + Send + Sync + 'static,
{
    let Some(call) = chain.window.begin() else {
        let _ = chain.out.send(Ok(chain.rec));
        return;
    };
    let (start, worker, seq) = (chain.start.clone(), chain.worker, call.seq);
    start(
        worker,
        seq,
        Box::new(move |outcome| match outcome {
            Ok(()) => {
                chain.window.end(call, &mut chain.rec);
                next(chain);
            }
            Err(e) => {
                let _ = chain.out.send(Err(e));
            }
        }),
    );
}

/// `inflight` chains of calls started by `start(worker, seq, done)`, each call's `done`
/// starting the chain's next; this thread waits until every chain has reported.
pub(super) fn chains<F>(inflight: usize, window: Arc<Window>, start: F) -> Result<Sample, String>
where
    F: Fn(usize, u64, Done) + Send + Sync + 'static,
{
    let (tx, rx) = channel();
    let start = Arc::new(start);
    let give_up = window.end + Duration::from_secs(60);
    for worker in 0..inflight {
        next(Chain {
            worker,
            rec: Recorder::default(),
            window: window.clone(),
            start: start.clone(),
            out: tx.clone(),
        });
    }
    let mut all = Recorder::default();
    for _ in 0..inflight {
        let left = give_up.saturating_duration_since(Instant::now());
        let rec = rx
            .recv_timeout(left)
            .map_err(|_| "a callback chain never finished (a callback that did not run)")??;
        all.merge(&rec);
    }
    window.sample(&all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ends at 50 calls (long before its 30 s).
    fn window() -> Arc<Window> {
        Arc::new(Window::new(
            Duration::ZERO,
            Duration::from_secs(30),
            Some(50),
        ))
    }

    #[test]
    fn threads_and_chains_stop_at_the_call_limit() {
        let s = threads(4, &window(), |_, _| Ok(())).unwrap();
        assert!((50..50 + 4).contains(&s.ops), "{s:?}");
        let s = chains(4, window(), |_, _, done| {
            std::thread::spawn(move || done(Ok(())));
        })
        .unwrap();
        assert!((50..50 + 4).contains(&s.ops), "{s:?}");
    }

    #[test]
    fn tasks_run_on_the_given_runtime_and_errors_end_the_measurement() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let s = tasks(rt.handle(), 3, window(), |_, _| async { Ok(()) }).unwrap();
        assert!(s.ops >= 50, "{s:?}");
        let e = tasks(rt.handle(), 2, window(), |_, seq| async move {
            match seq {
                5 => Err("boom".to_string()),
                _ => Ok(()),
            }
        })
        .unwrap_err();
        assert_eq!(e, "boom");
        let e = chains(2, window(), |_, seq, done| {
            done(if seq == 3 { Err("late".into()) } else { Ok(()) })
        });
        assert_eq!(e.unwrap_err(), "late");
    }
}
