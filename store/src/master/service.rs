//! `MasterService`: the master core over yuebing-rpc. Each call is decoded, run on the core
//! under its one lock, and answered once its log entries are durable.

use std::sync::Arc;

use super::server::Shared;
use crate::error::{Error, WireError};

/// The service name in the rpc preamble.
pub const SERVICE: &str = "master";

/// An answer: the value, or the error with its stable code.
pub type Reply<T> = Result<T, WireError>;

/// Readiness and position of a running master.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// Restored, bound and accepting calls.
    pub ready: bool,
    /// Whether mutations are made durable in a data directory.
    pub persistent: bool,
    /// Sequence number of the last mutation.
    pub last_seq: u64,
    /// Sequence number of the last durable mutation (equal to `last_seq` without a data dir).
    pub durable_seq: u64,
    /// Why the operation log stopped, if it did (mutations are refused then).
    pub failure: Option<String>,
    /// What it is in its cluster: `single` (no election), `leader`, or `standby` (an elected
    /// master that does not serve now).
    pub role: String,
    /// The epoch of the entries its state holds or makes (1 for a single master; an elected
    /// leader's is its election key's create revision).
    pub epoch: u64,
}

pub use super::api::{
    MasterService, MasterServiceClient, MasterServiceRequest, MasterServiceResponse,
    MasterServiceStub, ServeMasterService,
};

yuebing_rpc::client!(
    /// The master client as the rpc pools make it.
    pub type MasterServiceRpc = MasterServiceClient: MasterServiceRequest => MasterServiceResponse);

/// The server side: a handle on the shared core.
#[derive(Clone)]
pub(crate) struct MasterHandler {
    pub(crate) shared: Arc<Shared>,
}

/// What a [`MasterClient`](super::MasterClient) call takes for an argument sent as `T`: a `T`,
/// or a borrowed form of it (`&str` for a `String`, `&PutConfig` for a `PutConfig`).
pub trait Arg<T> {
    /// The value sent.
    fn into_arg(self) -> T;
}

impl<T> Arg<T> for T {
    fn into_arg(self) -> T {
        self
    }
}

impl Arg<String> for &str {
    fn into_arg(self) -> String {
        self.to_string()
    }
}

impl Arg<String> for &String {
    fn into_arg(self) -> String {
        self.clone()
    }
}

impl Arg<super::types::PutConfig> for &super::types::PutConfig {
    fn into_arg(self) -> super::types::PutConfig {
        self.clone()
    }
}

/// How a core call's result travels: what the service sends, and what a
/// [`MasterClient`](super::MasterClient) call returns on receiving it.
pub trait Answer: Sized {
    /// What is sent.
    type Wire;
    /// What the client's call returns.
    type Out;
    /// The server side: the core's result, or why the call could not run on it.
    fn send(ran: crate::Result<Self>) -> Self::Wire;
    /// The client side: the answer received, or why none was.
    fn receive(answer: crate::Result<Self::Wire>) -> Self::Out;
}

/// One outcome.
impl<T> Answer for crate::Result<T> {
    type Wire = Reply<T>;
    type Out = crate::Result<T>;

    fn send(ran: crate::Result<Self>) -> Reply<T> {
        ran.and_then(|r| r).map_err(|e| failed(&e))
    }

    fn receive(answer: crate::Result<Reply<T>>) -> crate::Result<T> {
        answer.and_then(unwire)
    }
}

/// One outcome per item of a batch (the call as a whole fails only if it could not run).
impl<T> Answer for Vec<crate::Result<T>> {
    type Wire = Reply<Vec<Reply<T>>>;
    type Out = crate::Result<Vec<crate::Result<T>>>;

    fn send(ran: crate::Result<Self>) -> Self::Wire {
        match ran {
            Ok(each) => Ok(each
                .into_iter()
                .map(|r| r.map_err(|e| e.to_wire()))
                .collect()),
            Err(e) => Err(failed(&e)),
        }
    }

    fn receive(answer: crate::Result<Self::Wire>) -> Self::Out {
        Ok(answer.and_then(unwire)?.into_iter().map(unwire).collect())
    }
}

/// A call's failure as it travels, also counted in the rpc server's statistics (errors by
/// code): the reply itself is a success at the rpc layer.
fn failed(e: &Error) -> WireError {
    yuebing_rpc::report_error(e.code());
    e.to_wire()
}

/// Turns an answer back into the store's error type.
pub(crate) fn unwire<T>(r: Reply<T>) -> crate::Result<T> {
    r.map_err(Error::from_wire)
}
