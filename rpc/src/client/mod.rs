//! Clients: pooled connections per endpoint, a registry of pools, and load balancing.

mod balance;
mod config;
mod connection;
mod pool;
mod registry;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use balance::{Balancer, Strategy};
pub use config::{CallOptions, PoolConfig};
pub use pool::{Pool, PoolStatus};
pub use registry::PoolRegistry;

/// A tarpc-generated client type that a [`Pool`] can create. Implement it with
/// [`client!`](crate::client).
pub trait ServiceClient: Clone + Send + Sync + 'static {
    /// The service's request enum (`FooRequest`).
    type Req: Serialize + Send + 'static;
    /// The service's response enum (`FooResponse`).
    type Resp: DeserializeOwned + Send + 'static;
    /// Wraps a connected tarpc channel.
    fn from_channel(channel: tarpc::client::Channel<Self::Req, Self::Resp>) -> Self;
}

/// Declares that a tarpc-generated client can be pooled:
/// `yuebing_rpc::client!(EchoClient: EchoRequest => EchoResponse);`
#[macro_export]
macro_rules! client {
    ($client:ty : $req:ty => $resp:ty) => {
        impl $crate::ServiceClient for $client {
            type Req = $req;
            type Resp = $resp;
            fn from_channel(channel: ::tarpc::client::Channel<$req, $resp>) -> Self {
                <$client>::from(channel)
            }
        }
    };
}
