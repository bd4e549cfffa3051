//! The engine's control service on yuebing-rpc (what peers ask it besides data).

use std::sync::{Arc, Weak};

use tarpc::context::Context;

use crate::segment::SegmentDescriptor;

/// The service name in the rpc preamble.
pub const SERVICE: &str = "engine";

/// Control calls between engines.
#[tarpc::service]
pub trait EngineControl {
    /// This engine's current segment descriptor, as JSON.
    async fn descriptor() -> Vec<u8>;
}

yuebing_rpc::client!(EngineControlClient: EngineControlRequest => EngineControlResponse);

/// Produces the engine's current descriptor.
pub(crate) type DescriptorSource = dyn Fn() -> Option<SegmentDescriptor> + Send + Sync;

/// The server side of [`EngineControl`].
#[derive(Clone)]
pub(crate) struct ControlServer {
    pub(crate) source: Arc<std::sync::OnceLock<Weak<DescriptorSource>>>,
}

impl EngineControl for ControlServer {
    async fn descriptor(self, _: Context) -> Vec<u8> {
        self.source
            .get()
            .and_then(Weak::upgrade)
            .and_then(|f| f())
            .map(|d| d.to_json())
            .unwrap_or_default()
    }
}
