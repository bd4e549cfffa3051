//! The bridge's rules in every calling context: plain threads, tasks of other runtimes (multi-
//! and current-thread), its own workers and callbacks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use yuebing_bridge::{Bridge, BridgeConfig, Error};
use yuebing_testkit::eventually;

fn bridge() -> Bridge {
    Bridge::new(BridgeConfig::default()).unwrap()
}

/// An operation that yields a few times (so it really runs on the runtime) and returns `x`.
async fn op(x: u64) -> Result<u64, Error> {
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    Ok(x)
}

#[test]
fn blocking_works_from_sixteen_plain_threads_at_once() {
    let b = bridge();
    std::thread::scope(|s| {
        for t in 0..16u64 {
            let b = &b;
            s.spawn(move || {
                for i in 0..50 {
                    assert_eq!(b.block_on(op(t * 1000 + i)).unwrap(), t * 1000 + i);
                }
            });
        }
    });
}

#[test]
fn blocking_works_from_tasks_of_other_runtimes() {
    let b = bridge();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let b2 = b.clone();
    let from_task = multi.block_on(async move {
        tokio::spawn(async move { b2.block_on(op(7)) })
            .await
            .unwrap()
    });
    assert_eq!(from_task.unwrap(), 7);
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b3 = b.clone();
    assert_eq!(
        current.block_on(async move { b3.block_on(op(8)) }).unwrap(),
        8
    );
}

#[test]
fn a_bridge_thread_gets_would_block_never_a_hang() {
    let b = bridge();
    // From a runtime worker of the bridge.
    let inner = b.clone();
    let nested = b
        .block_on(async move { Ok::<_, Error>(inner.block_on(op(1))) })
        .unwrap();
    assert_eq!(nested.unwrap_err(), Error::WouldBlockBridge);
    assert_eq!(Error::WouldBlockBridge.code(), -4001);
    // From a callback.
    let (tx, rx) = std::sync::mpsc::channel();
    let inner = b.clone();
    b.call(op(2)).then(move |r| {
        assert_eq!(r.unwrap(), 2);
        tx.send(inner.block_on(op(3))).unwrap();
    });
    let from_callback = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(from_callback.unwrap_err(), Error::WouldBlockBridge);
    // Shutting down from a callback would wait for itself.
    let (tx, rx) = std::sync::mpsc::channel();
    let inner = b.clone();
    b.call(op(4))
        .then(move |_| tx.send(inner.shutdown()).unwrap());
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap()
            .unwrap_err(),
        Error::WouldBlockBridge
    );
}

#[test]
fn a_supplied_runtime_must_be_multi_thread_and_its_threads_do_not_block() {
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let e = Bridge::with_handle(current.handle().clone(), 1).unwrap_err();
    assert_eq!(e, Error::CurrentThreadRuntime);
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let b = Bridge::with_handle(multi.handle().clone(), 1).unwrap();
    assert_eq!(b.block_on(op(5)).unwrap(), 5);
    let b2 = b.clone();
    let on_its_worker = multi.block_on(async move {
        tokio::spawn(async move { b2.block_on(op(6)) })
            .await
            .unwrap()
    });
    assert_eq!(on_its_worker.unwrap_err(), Error::WouldBlockBridge);
    b.shutdown().unwrap();
    // The supplied runtime goes on.
    assert_eq!(multi.block_on(async { 1 + 1 }), 2);
}

/// Sets its flag when dropped: the operation's work has stopped.
struct Stopped(Arc<AtomicBool>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Work that never ends by itself; `stopped` is set once it is dropped.
fn endless(stopped: &Arc<AtomicBool>) -> impl std::future::Future<Output = Result<u64, Error>> {
    let work = Stopped(stopped.clone());
    async move {
        let _work = work;
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok(0)
    }
}

#[test]
fn a_cancelled_or_timed_out_call_ends_only_once_its_work_stopped() {
    let b = bridge();
    for timed in [false, true] {
        let stopped = Arc::new(AtomicBool::new(false));
        let call = b.call(endless(&stopped));
        let outcome = match timed {
            true => call.wait_timeout(Duration::from_millis(50)),
            false => {
                let canceller = call.canceller();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(50));
                    canceller.cancel();
                    canceller.cancel();
                });
                call.wait()
            }
        };
        let want = if timed {
            Error::Timeout
        } else {
            Error::Canceled
        };
        assert_eq!(outcome.unwrap_err(), want);
        assert!(
            stopped.load(Ordering::SeqCst),
            "the outcome came before the work stopped"
        );
    }
    // Cancel after completion changes nothing.
    let call = b.call(op(9));
    let canceller = call.canceller();
    assert_eq!(call.wait().unwrap(), 9);
    canceller.cancel();
}

#[test]
fn a_panicking_or_sleeping_callback_leaves_other_calls_served() {
    let b = Bridge::new(BridgeConfig {
        worker_threads: 1,
        callback_threads: 2,
    })
    .unwrap();
    b.call(op(1))
        .then(|_| std::thread::sleep(Duration::from_secs(2)));
    b.call(op(2)).then(|_| panic!("a callback panics"));
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..10 {
        let tx = tx.clone();
        b.call(op(i)).then(move |r| tx.send(r.unwrap()).unwrap());
    }
    let mut got: Vec<u64> = (0..10)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "waited for the sleeping callback"
    );
    // And blocking calls are served meanwhile too.
    assert_eq!(b.block_on(op(11)).unwrap(), 11);
}

#[test]
fn every_callback_runs_exactly_once_and_none_after_shutdown() {
    const THREADS: usize = 16;
    const PER_THREAD: usize = 40;
    let b = bridge();
    let counts: Arc<Vec<AtomicUsize>> = Arc::new(
        (0..THREADS * PER_THREAD)
            .map(|_| AtomicUsize::new(0))
            .collect(),
    );
    let outcomes: Arc<[AtomicUsize; 5]> = Arc::new(Default::default());
    let after_shutdown = Arc::new(AtomicBool::new(false));
    let late = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (b, counts, outcomes) = (&b, counts.clone(), outcomes.clone());
            let (after_shutdown, late) = (after_shutdown.clone(), late.clone());
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let id = t * PER_THREAD + i;
                    let kind = id % 5;
                    let call = b.call(async move {
                        match kind {
                            0 => Ok(id as u64),
                            1 => Err(Error::Start {
                                reason: "an operation's own error".into(),
                            }),
                            // 2: cancelled; 3: deadline (its own timeout); 4: still running
                            // at shutdown.
                            _ => {
                                tokio::time::sleep(Duration::from_secs(60)).await;
                                Ok(0)
                            }
                        }
                    });
                    if kind == 2 {
                        call.cancel();
                    }
                    let (counts, outcomes) = (counts.clone(), outcomes.clone());
                    let (after_shutdown, late) = (after_shutdown.clone(), late.clone());
                    let tally = move |r: Result<u64, Error>| {
                        if after_shutdown.load(Ordering::SeqCst) {
                            late.fetch_add(1, Ordering::SeqCst);
                        }
                        counts[id].fetch_add(1, Ordering::SeqCst);
                        let slot = match r {
                            Ok(_) => 0,
                            Err(Error::Start { .. }) => 1,
                            Err(Error::Canceled) => 2,
                            Err(Error::Timeout) => 3,
                            Err(_) => 4,
                        };
                        outcomes[slot].fetch_add(1, Ordering::SeqCst);
                    };
                    if kind == 3 {
                        tally(call.wait_timeout(Duration::from_millis(5)));
                    } else {
                        call.then(tally);
                    }
                }
            });
        }
    });
    // Wait for the quick ones, then shut down with the sleepers (kind 4) pending.
    let quick = THREADS * PER_THREAD / 5 * 4;
    eventually::blocking("the quick calls ended", Duration::from_secs(30), || {
        let ended: usize = outcomes.iter().map(|o| o.load(Ordering::SeqCst)).sum();
        ended >= quick
    });
    b.shutdown().unwrap();
    after_shutdown.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    for (id, c) in counts.iter().enumerate() {
        assert_eq!(c.load(Ordering::SeqCst), 1, "call {id}");
    }
    let each = THREADS * PER_THREAD / 5;
    let got: Vec<usize> = outcomes.iter().map(|o| o.load(Ordering::SeqCst)).collect();
    assert_eq!(
        got,
        vec![each; 5],
        "success, error, cancel, deadline, shutdown"
    );
    assert_eq!(
        late.load(Ordering::SeqCst),
        0,
        "a callback ran after shutdown returned"
    );
    // After shutdown: new calls end at once with Shutdown.
    assert_eq!(b.block_on(op(1)).unwrap_err(), Error::Shutdown);
    b.shutdown().unwrap();
}

#[test]
fn a_blocking_call_from_a_bridge_thread_starts_nothing() {
    let b = bridge();
    let started = Arc::new(AtomicBool::new(false));
    let (inner, flag) = (b.clone(), started.clone());
    let nested = b
        .block_on(async move {
            Ok::<_, Error>(inner.block_on(async move {
                flag.store(true, Ordering::SeqCst);
                Ok::<_, Error>(())
            }))
        })
        .unwrap();
    assert_eq!(nested.unwrap_err(), Error::WouldBlockBridge);
    std::thread::sleep(Duration::from_millis(50));
    assert!(!started.load(Ordering::SeqCst), "the refused operation ran");
}

#[test]
fn a_panicking_operation_is_its_own_error_and_the_bridge_goes_on() {
    let b = bridge();
    let e = b
        .block_on(async {
            if std::hint::black_box(true) {
                panic!("an operation panics");
            }
            Ok::<u64, Error>(0)
        })
        .unwrap_err();
    assert!(matches!(&e, Error::Panicked { message } if message.contains("operation panics")));
    assert_eq!(e.code(), -4008);
    assert_eq!(b.block_on(op(3)).unwrap(), 3);
}

#[test]
fn the_last_handle_dropped_in_a_callback_or_a_task_shuts_down_in_the_background() {
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let b = bridge();
        let last = b.clone();
        b.call(op(1)).then(move |_| {
            drop(last);
            tx.send(()).unwrap();
        });
        drop(b);
    }
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the callback returned: dropping the bridge there did not block");
    let b = bridge();
    let last = b.clone();
    let dropped = b.call(async move {
        drop(last);
        Ok::<_, Error>(())
    });
    drop(b);
    // The drop in the task did not block it; the bridge then shut down around the call.
    let outcome = dropped.wait();
    assert!(
        matches!(outcome, Ok(()) | Err(Error::Shutdown)),
        "{outcome:?}"
    );
}

#[test]
fn concurrent_shutdowns_each_return_once_it_is_done() {
    let b = bridge();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    b.call(op(1)).then(move |_| {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::SeqCst);
    });
    std::thread::sleep(Duration::from_millis(50));
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (b, done) = (&b, &done);
            s.spawn(move || {
                b.shutdown().unwrap();
                assert!(
                    done.load(Ordering::SeqCst),
                    "a shutdown returned before the pending callback had"
                );
            });
        }
    });
}

/// A blocking call from a plain thread runs on that thread (no hand-off to a worker and back);
/// what it spawns runs on the bridge's runtime.
#[test]
fn a_blocking_call_from_a_plain_thread_runs_on_that_thread() {
    let b = bridge();
    let caller = std::thread::current().id();
    let (ran_on, spawned_on) = b
        .block_on(async {
            let here = std::thread::current().id();
            let spawned = tokio::spawn(async { std::thread::current().id() }).await;
            Ok::<_, Error>((here, spawned.unwrap()))
        })
        .unwrap();
    assert_eq!(ran_on, caller, "the call was handed to another thread");
    assert_ne!(
        spawned_on, caller,
        "a spawned task ran on the caller's thread"
    );
}

/// A shutdown stops a call that runs on its caller's thread as it stops a spawned one: the
/// caller hears `Shutdown` once the work has stopped, and the shutdown waits for that.
#[test]
fn a_shutdown_stops_a_call_running_on_its_callers_thread() {
    let b = bridge();
    let stopped = Arc::new(AtomicBool::new(false));
    let work = Stopped(stopped.clone());
    let started = Arc::new(AtomicBool::new(false));
    let (b2, started2, stopped2) = (b.clone(), started.clone(), stopped.clone());
    let caller = std::thread::spawn(move || {
        let outcome = b2.block_on(async move {
            let _work = work;
            started2.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok::<u64, Error>(0)
        });
        (outcome, stopped2.load(Ordering::SeqCst))
    });
    eventually::blocking("the call started", Duration::from_secs(10), || {
        started.load(Ordering::SeqCst)
    });
    b.shutdown().unwrap();
    assert!(
        stopped.load(Ordering::SeqCst),
        "shutdown returned before the work stopped"
    );
    let (outcome, stopped_before) = caller.join().unwrap();
    assert_eq!(outcome.unwrap_err(), Error::Shutdown);
    assert!(stopped_before, "the outcome came before the work stopped");
}

/// `block_on_sliced` calls `between` after each slice the call did not end in; its `Err`
/// stops the call and comes back once the work stopped: on a plain thread (where the call runs)
/// and in a task of another runtime (where it is spawned on the bridge's).
#[test]
fn a_sliced_wait_is_stopped_by_its_between_step_once_the_work_stopped() {
    let b = bridge();
    let sliced = |b: &Bridge| {
        let stopped = Arc::new(AtomicBool::new(false));
        let work = endless(&stopped);
        let mut slices = 0;
        let outcome = b.block_on_sliced(
            || work,
            Some(Duration::from_millis(10)),
            || {
                slices += 1;
                match slices {
                    3 => Err("stop"),
                    _ => Ok(()),
                }
            },
        );
        (outcome.unwrap_err(), slices, stopped.load(Ordering::SeqCst))
    };
    assert_eq!(sliced(&b), ("stop", 3, true));
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let b2 = b.clone();
    let in_task =
        multi.block_on(async move { tokio::spawn(async move { sliced(&b2) }).await.unwrap() });
    assert_eq!(in_task, ("stop", 3, true));
    // A call that ends within its first slice never calls `between`.
    let quick = b.block_on_sliced(|| op(4), Some(Duration::from_secs(10)), || Err("called"));
    assert_eq!(quick.unwrap().unwrap(), 4);
}

/// A call waited for in slices goes on while `between` runs (after its first slice it is no
/// longer polled by the waiting thread): a `between` that waits for the call's progress, as a
/// signal handler making a blocking call may, does not wait forever.
#[test]
fn a_sliced_call_goes_on_while_its_between_step_runs() {
    let b = bridge();
    let progressed = Arc::new(AtomicBool::new(false));
    let (set, seen) = (progressed.clone(), progressed.clone());
    let mut waited_in_between = None;
    let outcome = b.block_on_sliced(
        || async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            set.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok::<u64, Error>(0)
        },
        Some(Duration::from_millis(5)),
        || {
            // The first time: wait (at most 10 s) for the call to get past its first sleep.
            if waited_in_between.is_none() {
                let start = Instant::now();
                while !seen.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                waited_in_between = Some(seen.load(Ordering::SeqCst));
            }
            Err("stop")
        },
    );
    assert_eq!(outcome.unwrap_err(), "stop");
    assert_eq!(
        waited_in_between,
        Some(true),
        "the call stood still while between ran"
    );
}

/// A bridge on a supplied runtime never runs a call on its caller's thread: the runtime's
/// owner may shut it down under the call.
#[test]
fn a_bridge_on_a_supplied_runtime_spawns_its_blocking_calls() {
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let b = Bridge::with_handle(multi.handle().clone(), 1).unwrap();
    let caller = std::thread::current().id();
    let ran_on = b
        .block_on(async { Ok::<_, Error>(std::thread::current().id()) })
        .unwrap();
    assert_ne!(ran_on, caller);
    b.shutdown().unwrap();
}

/// A sliced call handed to the runtime after its first slice is still counted in: a shutdown
/// stops it and returns only once its work stopped, and the caller hears `Shutdown`.
#[test]
fn a_shutdown_stops_a_sliced_call_after_its_first_slice() {
    let b = bridge();
    let stopped = Arc::new(AtomicBool::new(false));
    let work = endless(&stopped);
    let slices = Arc::new(AtomicUsize::new(0));
    let (b2, slices2) = (b.clone(), slices.clone());
    let caller = std::thread::spawn(move || {
        b2.block_on_sliced(
            || work,
            Some(Duration::from_millis(5)),
            || {
                slices2.fetch_add(1, Ordering::SeqCst);
                Ok::<(), ()>(())
            },
        )
    });
    eventually::blocking("the call was handed over", Duration::from_secs(10), || {
        slices.load(Ordering::SeqCst) >= 2
    });
    b.shutdown().unwrap();
    assert!(
        stopped.load(Ordering::SeqCst),
        "shutdown returned before the work stopped"
    );
    assert_eq!(
        caller.join().unwrap().unwrap().unwrap_err(),
        Error::Shutdown
    );
}
