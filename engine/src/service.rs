//! The engine's control service on yuebing-rpc: what peers ask an engine besides data.

use std::sync::{Arc, OnceLock, Weak};

use tarpc::context::Context;

use crate::error::Error;
use crate::segment::SegmentDescriptor;

/// The service name in the rpc preamble.
pub const SERVICE: &str = "engine";

/// Control calls between engines.
#[tarpc::service]
pub trait EngineControl {
    /// This engine's current segment descriptor, as JSON.
    async fn descriptor() -> Vec<u8>;
    /// Delivers a notification from segment `from`; returns 0 or an engine error code
    /// (−3506 when the receiver's queue is full).
    async fn notify(from: String, message: Vec<u8>) -> i32;
    /// A connection handshake for this engine's transport `transport` (rdma's queue pairs):
    /// the transport's answer, or an engine error code.
    async fn connect(transport: String, request: Vec<u8>) -> Result<Vec<u8>, i32>;
}

yuebing_rpc::client!(
    /// The engine control client as the rpc pools make it.
    pub type EngineControlRpc = EngineControlClient: EngineControlRequest => EngineControlResponse);

/// A notification received from a peer (its `notify` call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The sending segment's name.
    pub from: String,
    /// The message.
    pub message: Vec<u8>,
}

/// What the control service asks of the engine it serves.
pub(crate) trait ControlHandler: Send + Sync {
    /// The engine's current descriptor.
    fn descriptor(&self) -> SegmentDescriptor;
    /// Queues a received notification.
    fn notify(&self, notification: Notification) -> Result<(), Error>;
    /// Hands a handshake to the transport named `transport`.
    fn connect(&self, transport: &str, request: &[u8]) -> Result<Vec<u8>, Error>;
}

/// The server side of [`EngineControl`]. It holds the engine weakly (the engine owns the
/// server), set once the engine exists.
#[derive(Clone)]
pub(crate) struct ControlServer {
    pub(crate) engine: Arc<OnceLock<Weak<dyn ControlHandler>>>,
}

impl ControlServer {
    fn engine(&self) -> Option<Arc<dyn ControlHandler>> {
        self.engine.get().and_then(Weak::upgrade)
    }
}

impl EngineControl for ControlServer {
    async fn descriptor(self, _: Context) -> Vec<u8> {
        self.engine()
            .map(|e| e.descriptor().to_json())
            .unwrap_or_default()
    }

    async fn notify(self, _: Context, from: String, message: Vec<u8>) -> i32 {
        match self.engine() {
            Some(e) => match e.notify(Notification { from, message }) {
                Ok(()) => 0,
                Err(err) => err.code(),
            },
            None => stopped().code(),
        }
    }

    async fn connect(
        self,
        _: Context,
        transport: String,
        request: Vec<u8>,
    ) -> Result<Vec<u8>, i32> {
        let engine = self.engine().ok_or_else(|| stopped().code())?;
        engine.connect(&transport, &request).map_err(|e| e.code())
    }
}

fn stopped() -> Error {
    Error::PeerFailed {
        reason: "engine stopped".into(),
    }
}
