//! The callback pool: threads of the bridge's own that run callbacks, never a runtime worker, so
//! that a callback that blocks (a C callback taking a lock, a Python one waiting for the GIL)
//! stalls no transfer. A panicking callback is caught and logged; the pool goes on.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A callback with its argument bound.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// The id of the bridge whose thread (runtime worker or callback) this is, if any.
    static BRIDGE_THREAD: Cell<Option<u64>> = const { Cell::new(None) };
}

thread_local! {
    /// How many C ABI calls this thread is inside (see [`ForeignCall`]).
    static FOREIGN_CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Marks the thread as inside a call from C for as long as it lives. A C caller may hold its
/// own locks across the call, which its callbacks may take: a bridge whose last handle is
/// dropped there (a Rust-made client handed to C and destroyed meanwhile) shuts down in the
/// background instead of waiting for those callbacks.
pub(crate) struct ForeignCall(());

impl ForeignCall {
    pub(crate) fn enter() -> ForeignCall {
        let _ = FOREIGN_CALLS.try_with(|n| n.set(n.get() + 1));
        ForeignCall(())
    }
}

impl Drop for ForeignCall {
    fn drop(&mut self) {
        let _ = FOREIGN_CALLS.try_with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Whether this thread is inside a call from C.
pub(crate) fn in_foreign_call() -> bool {
    FOREIGN_CALLS.try_with(|n| n.get() > 0).unwrap_or(false)
}

/// Marks the current thread as one of bridge `id`'s (where a blocking call must not wait).
pub(crate) fn mark_thread(id: u64) {
    BRIDGE_THREAD.with(|t| t.set(Some(id)));
}

/// The bridge this thread belongs to, if any.
pub(crate) fn bridge_of_thread() -> Option<u64> {
    BRIDGE_THREAD.with(Cell::get)
}

/// Threads that run callbacks in the order they were handed over (one queue, several threads).
pub(crate) struct CallbackPool {
    queue: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl CallbackPool {
    /// `threads` threads (at least one) named `yuebing-cb-N`, belonging to bridge `id`.
    pub(crate) fn start(id: u64, threads: usize) -> std::io::Result<CallbackPool> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut handles = Vec::new();
        for n in 0..threads.max(1) {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("yuebing-cb-{n}"))
                .spawn(move || {
                    mark_thread(id);
                    run(&rx);
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    drop(tx);
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(CallbackPool {
            queue: Mutex::new(Some(tx)),
            threads: Mutex::new(handles),
        })
    }

    /// Hands `job` to the pool; gives it back when the pool is closed.
    pub(crate) fn run(&self, job: Job) -> Result<(), Job> {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        match queue.as_ref() {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Closes the queue and returns once every callback handed over so far has returned. Not
    /// to be called from a pool thread (it would wait for itself).
    pub(crate) fn close(&self) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Runs a callback, catching and logging a panic.
pub(crate) fn run_caught(job: Job) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(job)) {
        let what = crate::call::panic_message(&*panic);
        tracing::error!(panic = %what, "a bridge callback panicked; the bridge goes on");
    }
}

/// A pool thread: takes callbacks until the queue is closed and empty.
fn run(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        let Ok(job) = job else {
            return;
        };
        run_caught(job);
    }
}
