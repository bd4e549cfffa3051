//! What a handler may know about the call it serves.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

/// The connection a service instance was created for (given to the service factory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// The peer's address (`ip:port`, or the Unix socket's peer description).
    pub peer: String,
    /// Server-unique connection number, starting at 1.
    pub conn_id: u64,
    /// The service the client asked for in its preamble.
    pub service: String,
}

/// Per-call context: available inside a handler through [`CallContext::current`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallContext {
    /// The connection the call arrived on.
    pub conn: Arc<ConnInfo>,
    /// tarpc's request id (unique per connection).
    pub request_id: u64,
    /// The method called.
    pub method: String,
}

tokio::task_local! {
    static CURRENT: CallContext;
    /// The error code a handler reported for the call it serves (see [`report_error`]).
    static REPORTED: Cell<Option<i32>>;
}

/// Counts the call this task serves as failed with `code` in the server's statistics
/// ([`Metrics`](crate::Metrics): errors by code), for a service whose answers carry their own
/// errors inside a successful reply; the reply itself is unchanged. Outside a call, nothing.
pub fn report_error(code: i32) {
    let _ = REPORTED.try_with(|c| c.set(Some(code)));
}

/// Runs `fut` (a call's handler) and returns its output with the error code it reported, if
/// any (see [`report_error`]).
pub(crate) async fn with_reported<F: std::future::Future>(fut: F) -> (F::Output, Option<i32>) {
    REPORTED
        .scope(Cell::new(None), async {
            let out = fut.await;
            (out, REPORTED.with(Cell::get))
        })
        .await
}

impl CallContext {
    /// The context of the call being served by the current task, if any.
    pub fn current() -> Option<CallContext> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Runs `fut` with `self` as the current call context.
    pub(crate) async fn scope<F: std::future::Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }
}

impl fmt::Display for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{} conn {} from {}",
            self.method, self.request_id, self.conn.conn_id, self.conn.peer
        )
    }
}
