//! Clients: pooled connections per endpoint, a registry of pools, and load balancing.

mod balance;
mod channel;
mod config;
mod connection;
mod driver;
mod members;
mod pool;
mod registry;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use balance::{Balancer, Strategy};
pub use channel::Channel;
pub use config::{CallOptions, PoolConfig};
pub use pool::{Pool, PoolStatus};
pub use registry::PoolRegistry;

/// A tarpc-generated client on a yuebing [`Channel`] that a [`Pool`] can create. Implement it
/// with [`client!`](crate::client).
pub trait ServiceClient: Clone + Send + Sync + 'static {
    /// The service's request enum (`FooRequest`).
    type Req: Serialize + tarpc::RequestName + Send + 'static;
    /// The service's response enum (`FooResponse`).
    type Resp: DeserializeOwned + Send + 'static;
    /// Wraps a connected channel.
    fn from_channel(channel: Channel<Self::Req, Self::Resp>) -> Self;
}

/// Names the pooled form of a tarpc-generated client and lets a [`Pool`] create it:
/// `yuebing_rpc::client!(pub type EchoRpc = EchoClient: EchoRequest => EchoResponse);`
/// declares `EchoRpc`, which is `EchoClient<yuebing_rpc::Channel<EchoRequest, EchoResponse>>`;
/// doc comments before `pub type` go to the alias.
#[macro_export]
macro_rules! client {
    ($(#[$attr:meta])* $vis:vis type $alias:ident = $client:ident : $req:ty => $resp:ty) => {
        $(#[$attr])*
        $vis type $alias = $client<$crate::Channel<$req, $resp>>;

        impl $crate::ServiceClient for $alias {
            type Req = $req;
            type Resp = $resp;
            fn from_channel(channel: $crate::Channel<$req, $resp>) -> Self {
                <$alias>::from(channel)
            }
        }
    };
}
