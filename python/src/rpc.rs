//! `yuebing.MessageServer` and `yuebing.MessageClient`: byte messages to a server's Python
//! callback, each delivered once (the bridge's [`messages`](yuebing_bridge::messages), under
//! the drop-in's `mooncake.engine.RpcInterface`).
//!
//! Python callbacks (a server's `on_message`, a `send_then`'s `done`) run on the callback
//! bridge's threads ([`runtime::callback_bridge`]), never on a runtime worker, and may make
//! any call of this package, blocking ones included. An exception a callback raises goes to
//! `sys.unraisablehook`. While the interpreter shuts down no callback runs: a message that
//! arrives then is refused (`Shutdown`) and a `done` is dropped.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use yuebing_bridge::messages::{self, Message, MessageClientConfig, MessageServerConfig, SERVICE};
use yuebing_rpc::{PoolConfig, ServerConfig, Token};

use crate::errors;
use crate::memory::copy_of;
use crate::options::{duration, size};
use crate::runtime::{self, ForkSafe};
use crate::wait::wait;

/// A cluster token from Python (`None`: none), as a typed error if it cannot be one.
fn token(py: Python<'_>, token: Option<String>) -> PyResult<Option<Token>> {
    token
        .map(Token::new)
        .transpose()
        .map_err(|e| errors::to_py(py, &e.into()))
}

/// Calls `callback(*args)` on this (callback) thread, with the GIL; an exception goes to
/// `sys.unraisablehook`. `Err(Shutdown)` without calling it while the interpreter shuts down.
fn call_back(
    callback: &Py<PyAny>,
    args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, PyTuple>>,
) -> yuebing_bridge::Result<()> {
    Python::try_attach(|py| {
        if let Err(e) = args(py).and_then(|a| callback.call1(py, a)) {
            e.write_unraisable(py, Some(callback.bind(py)));
        }
    })
    .ok_or(yuebing_bridge::Error::Shutdown)
}

/// A server of messages: `MessageServer(bind="127.0.0.1:0", on_message=None, *, token=None,
/// max_message="64MiB")` listens at once; each message that arrives is handed to
/// `on_message(source, data)` (`source` the sender's `ip:port`, `data` bytes) on a callback
/// thread, once, and its sender's `send` returns once that call returned. Without
/// `on_message` messages are taken and dropped.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct MessageServer {
    server: ForkSafe<Arc<messages::MessageServer>>,
}

#[pymethods]
impl MessageServer {
    #[new]
    #[pyo3(signature = (bind="127.0.0.1:0", on_message=None, *, token=None, max_message=None))]
    fn new(
        py: Python<'_>,
        bind: &str,
        on_message: Option<Py<PyAny>>,
        token: Option<String>,
        max_message: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MessageServer> {
        let mut rpc = ServerConfig {
            token: self::token(py, token)?,
            ..ServerConfig::default()
        };
        if let Some(max) = max_message {
            rpc.max_frame = size(max, "max_message")?;
        }
        let config = MessageServerConfig {
            bind: bind.to_string(),
            rpc,
        };
        let callback = move |m: Message| match &on_message {
            None => Ok(()),
            Some(cb) => call_back(cb, |py| {
                (m.source.as_str(), PyBytes::new(py, &m.data)).into_pyobject(py)
            }),
        };
        let callbacks = runtime::callback_bridge(py)?;
        let start = messages::MessageServer::start_with_callback(&callbacks, config, callback);
        let server = wait(py, runtime::bridge(py)?.call(start))?;
        Ok(MessageServer {
            server: ForkSafe::new(Arc::new(server)),
        })
    }

    /// Where it listens, `ip:port` (the port it got, for a bind to port 0), or the Unix
    /// socket's `unix://` address.
    #[getter]
    fn address(&self) -> String {
        let server = self.server.any_process();
        match server.local_addr() {
            Some(addr) => addr.to_string(),
            None => server.endpoint().to_string(),
        }
    }

    /// Whether it still serves (`stop` was not called).
    #[getter]
    fn running(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.server.get(py)?.is_running())
    }

    /// Stops listening, lets the messages being handled finish for up to `grace` seconds
    /// (their callbacks included), and returns once it stopped; True, or False if it was
    /// stopped already.
    #[pyo3(signature = (grace=5.0))]
    fn stop(&self, py: Python<'_>, grace: f64) -> PyResult<bool> {
        let grace = duration(py, grace, "grace")?;
        let server = self.server.get(py)?.clone();
        let stop = async move { Ok::<_, yuebing_bridge::Error>(server.stop(grace).await) };
        Ok(wait(py, runtime::bridge(py)?.call(stop))?.is_some())
    }

    /// Blocks until the server is stopped (by `stop` from another thread, or a callback),
    /// with the GIL released; Ctrl-C interrupts the wait (not the server).
    fn wait_stopped(&self, py: Python<'_>) -> PyResult<()> {
        let stopped = self.server.get(py)?.stopped();
        let until = async move {
            stopped.await;
            Ok::<_, yuebing_bridge::Error>(())
        };
        wait(py, runtime::bridge(py)?.call(until))
    }

    fn __repr__(&self) -> String {
        format!("MessageServer({:?})", self.address())
    }
}

/// Sends messages to `MessageServer`s: `MessageClient(*, token=None, timeout=30.0,
/// connections=4, max_message="64MiB")`, with up to `connections` pooled connections per
/// target and `timeout` seconds per send.
#[pyclass(module = "yuebing._native", frozen)]
pub(crate) struct MessageClient {
    client: ForkSafe<messages::MessageClient>,
}

#[pymethods]
impl MessageClient {
    #[new]
    #[pyo3(signature = (*, token=None, timeout=30.0, connections=4, max_message=None))]
    fn new(
        py: Python<'_>,
        token: Option<String>,
        timeout: f64,
        connections: usize,
        max_message: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MessageClient> {
        if connections == 0 {
            return Err(errors::invalid(py, "connections must be at least 1"));
        }
        let mut pool = PoolConfig {
            token: self::token(py, token)?,
            max_connections: connections,
            default_timeout: duration(py, timeout, "timeout")?,
            ..PoolConfig::new(SERVICE)
        };
        if let Some(max) = max_message {
            pool.max_frame = size(max, "max_message")?;
        }
        let config = MessageClientConfig {
            pool,
            ..MessageClientConfig::default()
        };
        let handle = runtime::bridge(py)?.handle().clone();
        Ok(MessageClient {
            client: ForkSafe::new(messages::MessageClient::new_on(config, handle)),
        })
    }

    /// Sends `data` (any C-contiguous buffer, copied) to the server at `target` (`host:port`)
    /// and returns once its callback took it; raises the error (`Connect`, `RpcTimeout`, ...,
    /// or the server's) otherwise. The GIL is released meanwhile.
    fn send(&self, py: Python<'_>, target: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = copy_of(data, "data")?;
        let send = self.client.get(py)?.send(target, data);
        wait(py, runtime::bridge(py)?.call(send))
    }

    /// Starts sending `data` to `target` and returns at once; `done(None)` once the server's
    /// callback took it, or `done(error)` with the exception instance, is called exactly once
    /// on a callback thread.
    fn send_then(
        &self,
        py: Python<'_>,
        target: &str,
        data: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<()> {
        let data = copy_of(data, "data")?;
        let send = self.client.get(py)?.send(target, data);
        runtime::callback_bridge(py)?
            .call(send)
            .then(move |outcome| {
                // Nothing to tell while the interpreter shuts down.
                let _ = call_back(&done, |py| {
                    let outcome = match outcome {
                        Ok(()) => py.None(),
                        Err(e) => errors::to_py(py, &e).into_value(py).into_any(),
                    };
                    PyTuple::new(py, [outcome])
                });
            });
        Ok(())
    }
}
