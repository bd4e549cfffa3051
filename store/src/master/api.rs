//! The master's calls, defined once. Each row of the table at the end names a call, its
//! arguments, what the core returns and how the core answers it; [`master_api!`] turns the table
//! into the tarpc trait [`MasterService`](super::service::MasterService), the server's handler
//! and the typed methods of [`MasterClient`](super::MasterClient), and lists the calls that
//! may be sent again after a lost connection. A new call is one new row.
//!
//! Every call carries the caller's client id on the wire, used or not, so that all rows have
//! one shape. What a row's core expression returns decides the answer's shape (see
//! [`Answer`](super::service::Answer)): a `Result<T>` for one outcome, a `Vec<Result<T>>` for
//! one outcome per item of a batch.

use super::grant::{GrantDesc, GrantId, GrantedPut};
use super::ha::bootstrap::SnapshotChunk;
use super::service::{Answer, Arg, Health, MasterHandler, Reply};
use super::task::{TaskId, TaskInfo, TaskWork};
use super::types::{
    CallStats, ClientId, ListedObject, MountId, MountSpec, PingResult, PutConfig, ReplicaDesc,
    ReplicaList, Stats, Write,
};
use super::MasterClient;
use crate::error::Result;

/// Expands the table of calls (see the module docs). A row:
///
/// ```text
/// /// docs
/// idempotent fn name(arg: Type, ..) -> CoreResult = |master, now, client| expression;
/// ```
///
/// `idempotent` (or `once`) says whether the call may be sent again after a lost connection;
/// the expression runs on the core under its lock, with `now` in milliseconds and the caller's
/// [`ClientId`]. A row whose expression starts with `server`
/// (`= server |shared, now, client| …`) is answered from the master's own state instead (its
/// rpc statistics): not on the core, under no lock, and by a standby too (see
/// `Shared::outside_core`). A row marked `presence` (`= presence |presence, now, client| …`)
/// is answered from the core's [`Presence`](super::presence::Presence), without the core's
/// lock but otherwise as a read of the core (see `Shared::present`).
macro_rules! master_api {
    ($(
        $(#[doc = $doc:literal])*
        $retry:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty
            = $($on:ident)? |$m:pat_param, $now:pat_param, $client:pat_param| $body:expr;
    )*) => {
        /// The master's calls. Client ids are `u128` (see [`ClientId`]).
        #[tarpc::service]
        pub trait MasterService {
            // The two calls outside the table come first, so that a new row, appended at the
            // end, renumbers none (see `WIRE_ORDER`).
            /// Readiness check.
            async fn health() -> Health;
            /// A piece of the snapshot this master offers to standbys (see
            /// [`bootstrap`](super::ha::bootstrap)); not gated: an offered snapshot is a durable
            /// prefix of the log.
            async fn snapshot_chunk(seq: u64, offset: u64, max_len: u64) -> Reply<SnapshotChunk>;
            $(
                $(#[doc = $doc])*
                async fn $name(client: u128, $($arg: $ty),*) -> <$ret as Answer>::Wire;
            )*
        }

        impl MasterService for MasterHandler {
            $(
                async fn $name(
                    self,
                    _: tarpc::context::Context,
                    caller: u128,
                    $($arg: $ty),*
                ) -> <$ret as Answer>::Wire {
                    let ran = run_on!($($on)?; self.shared, |$m, $now| -> $ret {
                        let $client = ClientId(caller);
                        $body
                    });
                    <$ret as Answer>::send(ran)
                }
            )*

            async fn health(self, _: tarpc::context::Context) -> Health {
                self.shared.health()
            }

            async fn snapshot_chunk(
                self,
                _: tarpc::context::Context,
                seq: u64,
                offset: u64,
                max_len: u64,
            ) -> Reply<SnapshotChunk> {
                self.shared
                    .snapshot_chunk(seq, offset, max_len)
                    .map_err(|e| e.to_wire())
            }
        }

        impl MasterClient {
            $(
                $(#[doc = $doc])*
                pub async fn $name(&self, $($arg: impl Arg<$ty>),*) -> <$ret as Answer>::Out {
                    let caller = self.client.0;
                    $(let $arg: $ty = $arg.into_arg();)*
                    let answer = self
                        .pool
                        .call_with(self.options(stringify!($name)), |c, ctx| {
                            $(let $arg = $arg.clone();)*
                            async move { c.$name(ctx, caller, $($arg),*).await }
                        })
                        .await
                        .map_err(Into::into);
                    <$ret as Answer>::receive(answer)
                }
            )*
        }

        /// The calls that may be sent again after a lost connection (reads, pings, ends: a
        /// repeated end is `Ok`).
        pub(crate) fn idempotent_calls() -> Vec<&'static str> {
            let mut calls = vec!["health", "snapshot_chunk"];
            $(
                if retry!($retry) {
                    calls.push(stringify!($name));
                }
            )*
            calls
        }

        /// Every call in the order of the service's request enum: a request goes on the wire
        /// as its index in this list (bincode's enum tag), so the list only ever grows at the
        /// end, unless `yuebing_rpc::PROTOCOL_VERSION` changes with it.
        #[cfg(test)]
        pub(crate) const WIRE_ORDER: &[&str] = &["health", "snapshot_chunk", $(stringify!($name),)*];
    };
}

/// Where a row's expression runs: on the core (no marker), on its keys (`presence`), or on
/// the master's own state (`server`); any other word does not compile.
macro_rules! run_on {
    (; $shared:expr, $f:expr) => {
        $shared.run($f).await
    };
    (server; $shared:expr, $f:expr) => {
        $shared.outside_core($f)
    };
    (presence; $shared:expr, $f:expr) => {
        $shared.present($f).await
    };
}

/// Whether a row's `idempotent`/`once` marker lets the call be sent again (any other word
/// does not compile).
macro_rules! retry {
    (idempotent) => {
        true
    };
    (once) => {
        false
    };
}

master_api! {
    /// See `Master::mount`.
    once fn mount(specs: Vec<MountSpec>) -> Result<Vec<MountId>>
        = |m, now, client| m.mount(client, now, &specs);
    /// See `Master::remount`.
    once fn remount(specs: Vec<MountSpec>) -> Result<Vec<MountId>>
        = |m, now, client| m.remount(client, now, &specs);
    /// See `Master::unmount`.
    once fn unmount(mount: MountId) -> Result<()>
        = |m, now, client| m.unmount(client, now, mount);
    /// See `Master::ping`.
    idempotent fn ping() -> Result<PingResult>
        = |m, now, client| Ok(m.ping(client, now));
    /// See `Master::put_start`.
    once fn put_start(key: String, size: u64, cfg: PutConfig, write: Write)
        -> Result<Vec<ReplicaDesc>>
        = |m, now, client| m.put_start(client, now, &key, size, &cfg, write);
    /// See `Master::put_end`.
    idempotent fn put_end(key: String) -> Result<()>
        = |m, now, client| m.put_end(client, now, &key);
    /// See `Master::put_revoke`.
    once fn put_revoke(key: String) -> Result<()>
        = |m, now, client| m.put_revoke(client, now, &key);
    /// See `Master::batch_put_start`.
    once fn batch_put_start(items: Vec<(String, u64)>, cfg: PutConfig, write: Write)
        -> Vec<Result<Vec<ReplicaDesc>>>
        = |m, now, client| m.batch_put_start(client, now, &items, &cfg, write);
    /// See `Master::batch_put_end`.
    once fn batch_put_end(keys: Vec<String>) -> Vec<Result<()>>
        = |m, now, client| m.batch_put_end(client, now, &keys);
    /// See `Master::batch_put_revoke`.
    once fn batch_put_revoke(keys: Vec<String>) -> Vec<Result<()>>
        = |m, now, client| m.batch_put_revoke(client, now, &keys);
    /// See `Master::get_replica_list`.
    idempotent fn get_replica_list(key: String) -> Result<ReplicaList>
        = |m, now, _| m.get_replica_list(now, &key);
    /// See `Master::batch_get_replica_list`.
    idempotent fn batch_get_replica_list(keys: Vec<String>) -> Vec<Result<ReplicaList>>
        = |m, now, _| m.batch_get_replica_list(now, &keys);
    /// See `Master::exist`.
    idempotent fn exist(key: String) -> Result<bool>
        = presence |p, _, _| p.exist(&key);
    /// See `Master::batch_exist`.
    idempotent fn batch_exist(keys: Vec<String>) -> Vec<Result<bool>>
        = presence |p, _, _| p.batch_exist(&keys);
    /// See `Master::get_size`.
    idempotent fn get_size(key: String) -> Result<u64>
        = |m, _, _| m.get_size(&key);
    /// See `Master::remove`.
    once fn remove(key: String, force: bool) -> Result<()>
        = |m, now, _| m.remove(now, &key, force);
    /// See `Master::batch_remove`.
    once fn batch_remove(keys: Vec<String>, force: bool) -> Vec<Result<()>>
        = |m, now, _| m.batch_remove(now, &keys, force);
    /// See `Master::remove_by_regex`.
    once fn remove_by_regex(pattern: String, force: bool) -> Result<u64>
        = |m, now, _| m.remove_by_regex(now, &pattern, force);
    /// See `Master::remove_all`.
    once fn remove_all(force: bool) -> Result<u64>
        = |m, now, _| Ok(m.remove_all(now, force));
    /// See `Master::list`.
    idempotent fn list(prefix: String, limit: u64) -> Result<Vec<ListedObject>>
        = |m, _, _| Ok(m.list(&prefix, usize::try_from(limit).unwrap_or(usize::MAX)));
    /// See `Master::stats`.
    idempotent fn stats() -> Result<Stats>
        = |m, _, _| Ok(m.stats());
    /// See `Master::leave`.
    idempotent fn leave() -> Result<()>
        = |m, now, client| { m.leave(client, now); Ok(()) };
    /// See `Master::unmount_within` (a repeat is `Ok`: it may be sent again).
    idempotent fn unmount_within(mount: MountId, grace_ms: u64) -> Result<()>
        = |m, now, client| m.unmount_within(client, now, mount, grace_ms);
    /// See `Master::batch_replica_clear`.
    once fn batch_replica_clear(keys: Vec<String>, node: String) -> Result<Vec<String>>
        = |m, now, _| Ok(m.batch_replica_clear(now, &keys, &node));
    /// See `Master::task_copy`.
    once fn task_copy(key: String, targets: Vec<String>) -> Result<TaskId>
        = |m, now, _| m.task_copy(now, &key, &targets);
    /// See `Master::task_move`.
    once fn task_move(key: String, source: String, target: String) -> Result<TaskId>
        = |m, now, _| m.task_move(now, &key, &source, &target);
    /// See `Master::task_query`.
    idempotent fn task_query(id: TaskId) -> Result<TaskInfo>
        = |m, _, _| m.task_query(id);
    /// See `Master::task_take` (not sent again: a lost answer's tasks time out).
    once fn task_take() -> Result<Vec<TaskWork>>
        = |m, now, client| m.task_take(client, now);
    /// See `Master::task_end` (a repeat is `Ok`: it may be sent again).
    idempotent fn task_end(id: TaskId, error: Option<(i32, String)>) -> Result<()>
        = |m, now, client| m.task_end(client, now, id, error);
    /// What this master's rpc server counted of the calls it served, by method (see
    /// [`CallStats`]); answered from the server's counters, not the core, and by a standby
    /// too.
    idempotent fn call_stats() -> Result<CallStats>
        = server |shared, _, _| Ok(shared.call_stats());
    /// See `Master::grant`.
    once fn grant(len: u64, preferred: Vec<String>) -> Result<GrantDesc>
        = |m, now, client| m.grant(client, now, len, &preferred);
    /// See `Master::put_granted`.
    once fn put_granted(put: GrantedPut, cfg: PutConfig, write: Write) -> Result<()>
        = |m, now, client| m.put_granted(client, now, &put, &cfg, write);
    /// See `Master::batch_put_granted`.
    once fn batch_put_granted(puts: Vec<GrantedPut>, cfg: PutConfig, write: Write)
        -> Vec<Result<()>>
        = |m, now, client| m.batch_put_granted(client, now, &puts, &cfg, write);
    /// See `Master::grant_end` (a repeat is `Ok`: it may be sent again).
    idempotent fn grant_end(grant: GrantId, dirty: bool) -> Result<()>
        = |m, now, client| m.grant_end(client, now, grant, dirty);
}

#[cfg(test)]
mod tests {
    /// The master's request enum as protocol version 2 numbers it. A new call is a new row at
    /// the end of the table, and a new name at the end of this list. Removing or reordering a
    /// call, or changing its arguments, changes what the calls after it mean to a peer of the
    /// other order (it would decode them as other calls): bump `yuebing_rpc::PROTOCOL_VERSION`
    /// and write the new order here.
    #[test]
    fn the_calls_keep_their_wire_numbers() {
        assert_eq!(yuebing_rpc::PROTOCOL_VERSION, 2);
        let expected: &[&str] = &[
            "health",
            "snapshot_chunk",
            "mount",
            "remount",
            "unmount",
            "ping",
            "put_start",
            "put_end",
            "put_revoke",
            "batch_put_start",
            "batch_put_end",
            "batch_put_revoke",
            "get_replica_list",
            "batch_get_replica_list",
            "exist",
            "batch_exist",
            "get_size",
            "remove",
            "batch_remove",
            "remove_by_regex",
            "remove_all",
            "list",
            "stats",
            "leave",
            "unmount_within",
            "batch_replica_clear",
            "task_copy",
            "task_move",
            "task_query",
            "task_take",
            "task_end",
            "call_stats",
            "grant",
            "put_granted",
            "batch_put_granted",
            "grant_end",
        ];
        assert_eq!(super::WIRE_ORDER, expected);
    }

    #[test]
    fn reads_pings_and_ends_may_be_sent_again_and_mutations_not() {
        let calls = super::idempotent_calls();
        for read in [
            "health",
            "ping",
            "get_replica_list",
            "exist",
            "list",
            "put_end",
            "call_stats",
        ] {
            assert!(calls.contains(&read), "{read}");
        }
        for write in ["put_start", "remove", "remove_all", "batch_remove", "mount"] {
            assert!(!calls.contains(&write), "{write}");
        }
    }
}
