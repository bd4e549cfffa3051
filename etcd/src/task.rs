//! [`Task`]: a spawned task that stops when its owner drops it.

/// A spawned task, aborted when this is dropped.
#[derive(Debug)]
pub(crate) struct Task(tokio::task::AbortHandle);

impl Task {
    /// Owns `task`: dropping the result aborts it.
    pub(crate) fn new<T>(task: tokio::task::JoinHandle<T>) -> Self {
        Task(task.abort_handle())
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}
