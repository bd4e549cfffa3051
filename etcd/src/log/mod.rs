//! [`EtcdLog`]: the elected master's operation log in etcd (issue 16, item 5).
//!
//! The log is a run of [`LogGroup`]s, each under `<prefix>/<cluster>/master/log/<first seq,
//! 20 digits>` ([`LogGroup::key`] with [`Keys::master`] as its prefix), so that keys sort in
//! log order and a range read returns the log in order. Sequence numbers are contiguous from
//! group to group.
//!
//! # Appending
//! [`EtcdLog::append`] writes one group in one etcd transaction, guarded by the leader's
//! [`Epoch`]: it commits only while the leader's election key still has the create revision
//! it had when the leader won (`CreateRevision(key) == epoch`) **and** no group starts at the
//! same sequence number yet (`Version(group key) == 0`). A deposed leader that has not noticed
//! yet therefore cannot commit ([`Error::Deposed`]), and of two appenders racing for one
//! sequence number exactly one wins (the other gets [`Error::LogConflict`]). Before sending,
//! the group must start right after the last group this `EtcdLog` appended in that epoch
//! (learnt from etcd at the epoch's first append): otherwise [`Error::LogGap`], and nothing is
//! sent ([`EtcdLog::resume`] learns the end explicitly). Appends on one `EtcdLog` are
//! serialised, so they commit in the order they were called.
//!
//! An append that failed with [`Error::Timeout`] or [`Error::Unavailable`] may or may not have
//! committed. Append the same group again: if the first try had committed, the retry finds the
//! same value under the same epoch and returns the revision it was written at.
//!
//! # Reading
//! [`EtcdLog::read_from`] returns the log from the group that holds a given sequence number on,
//! at one etcd revision (paginated, each page read at that revision), with that revision, from
//! which [`EtcdLog::watch_from`] continues. Every group is decoded and checked (magic, version,
//! every checksum, that its key names its first entry, and that the groups are contiguous): any
//! damage is an error that keeps the store's code (`Corrupt`, −1500) and nothing is returned
//! to apply.
//!
//! # Truncating
//! [`EtcdLog::truncate`] deletes the groups wholly at or below a sequence number, keeping any
//! group that also holds later entries, and always the newest group, so that the log's end
//! stays known. Deleted keys do not shrink etcd's history: without [`EtcdLog::compact`] etcd
//! keeps every old revision, reaches its space quota and goes read-only. Compacting also makes
//! watches and reads from older revisions fail with [`Error::Compacted`].
//!
//! # Standbys
//! Each standby publishes the last sequence number it applied under
//! `<prefix>/<cluster>/master/standbys/<id>` on its own lease ([`EtcdLog::publish_applied`]);
//! the leader truncates only up to min(its snapshot, the lowest of those positions,
//! [`EtcdLog::applied_positions_at`]). A standby that dies stops counting one lease TTL later,
//! and one whose position stands still behind the snapshots for `HaConfig::standby_stall`
//! (alive but wedged) stops counting then.
//!
//! # Example
//! ```no_run
//! # async fn example(
//! #     config: yuebing_etcd::EtcdConfig,
//! #     entries: Vec<yuebing_store::master::LogEntry>,
//! # ) -> yuebing_etcd::Result<()> {
//! use futures::StreamExt;
//! use std::time::Duration;
//! use tokio::runtime::Handle;
//! use yuebing_etcd::{Election, Epoch, Error, EtcdLog};
//!
//! let log = EtcdLog::connect_on(&config, &Handle::current()).await?;
//! // A standby: what is in the log, then what comes (read again after an error).
//! let (groups, revision) = log.read_from(1).await?;
//! let mut follow = log.watch_from(revision);
//! while let Some(group) = follow.next().await {
//!     let group = group?; // apply it after `groups`, through a `Tail`
//! #   break;
//! }
//! // A leader: once elected and caught up, append under its epoch; Deposed means stop.
//! let election = Election::connect_on(&config, Duration::from_secs(5), Handle::current()).await?;
//! let leadership = election.campaign("127.0.0.1:50051".into()).await?;
//! let epoch = Epoch::from(&leadership);
//! let last = log.resume(&epoch).await?; // the first entry to append is last + 1
//! match log.append_entries(entries, &epoch).await {
//!     Ok(_revision) => {} // durable: acknowledge
//!     Err(Error::Deposed { .. }) => {} // no longer the leader: stop serving
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Runtime
//! Nothing here spawns: every call is a request on the client (whose connections live on the
//! runtime it was made for), and the watch is a stream its caller polls; dropping it closes the
//! watch.

mod read;
mod standbys;
mod truncate;
mod watch;

use std::future::Future;
use std::time::Duration;

use etcd_client::proto::PbTxnOpResponse;
use etcd_client::{
    Client, Compare, CompareOp, GetOptions, GetResponse, SortOrder, SortTarget, Txn, TxnOp,
    TxnResponse,
};
use futures::stream::BoxStream;
use tokio::runtime::Handle;
use yuebing_store::master::ha::{split_groups, GroupLimits, LogGroup};
use yuebing_store::master::LogEntry;

use crate::config::{EtcdConfig, Keys};
use crate::error::{Error, Result};
use crate::metadata::timed;

/// An etcd revision: a point in etcd's history, the same across all keys.
pub type Revision = i64;

/// The term of a leader: its election key and the create revision of that key. The create
/// revision *is* the epoch: it grows from leader to leader (lease ids are per etcd member and
/// not ordered), and a key deleted and created again gets a new one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Epoch {
    /// The leader's election key (`<election>/<lease id, hex>`).
    pub election_key: String,
    /// Its create revision, as campaigning reported it.
    pub create_revision: i64,
}

impl From<&crate::election::Leadership> for Epoch {
    /// The epoch of a won election: the leader's key and its create revision.
    fn from(leadership: &crate::election::Leadership) -> Self {
        Epoch {
            election_key: leadership.key().to_string(),
            create_revision: leadership.epoch(),
        }
    }
}

/// The master's operation log in etcd (see the module documentation). `Send + Sync`; share it
/// in an `Arc`.
pub struct EtcdLog {
    client: Client,
    keys: Keys,
    /// `Keys::master()`, the prefix handed to `LogGroup::key`.
    prefix: String,
    timeout: Duration,
    /// The last group this log appended, and in which epoch; held across an append, so that
    /// appends are serialised. `None` until the first append, or after a conflict.
    appended: tokio::sync::Mutex<Option<Appended>>,
}

/// Where this `EtcdLog`'s appends stand.
#[derive(Debug, Clone, Copy)]
struct Appended {
    /// The epoch's create revision.
    epoch: i64,
    /// Last sequence number of the last group in the log (0: none).
    last: u64,
}

impl std::fmt::Debug for EtcdLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLog")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Most keys one range request of the log returns.
const PAGE: i64 = 256;

/// How far before a sequence number a read looks first for the group that holds it: the most
/// entries a group may have ([`GroupLimits::default`]; [`EtcdLog::append`] refuses larger).
const WINDOW: u64 = 4096;

impl EtcdLog {
    /// A log for `config`'s cluster on a new client whose connections live on `handle`'s
    /// runtime (see [`EtcdConfig::connect_on`]).
    pub async fn connect_on(config: &EtcdConfig, handle: &Handle) -> Result<Self> {
        let client = config.connect_on(handle).await?;
        Self::with_client(client, config)
    }

    /// A log on an existing client, with `config`'s keys and request timeout (each unary
    /// request gets it).
    pub fn with_client(client: Client, config: &EtcdConfig) -> Result<Self> {
        let keys = config.keys()?;
        Ok(EtcdLog {
            client,
            prefix: keys.master(),
            keys,
            timeout: config.request_timeout,
            appended: tokio::sync::Mutex::new(None),
        })
    }

    /// Where this log's keys live.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The key of the group that starts at `first`.
    pub fn group_key(&self, first: u64) -> String {
        LogGroup::key(&self.prefix, first)
    }

    /// Appends `group` in `epoch`, returning the etcd revision it was written at.
    ///
    /// Errors:
    /// - [`Error::LogGap`]: not sent; the group does not start right after the last one
    ///   appended.
    /// - [`Error::Log`] with the store's `InvalidParams`: not sent; the group is over
    ///   [`GroupLimits::default`] (cut entries with [`EtcdLog::append_entries`]) or the epoch's
    ///   create revision is not positive. Another [`Error::Log`]: the group does not encode.
    /// - [`Error::Deposed`]: not written; the election key is gone or was created again. Stop.
    /// - [`Error::LogConflict`]: not written; another appender wrote that sequence number.
    /// - an etcd error (`Timeout`, `Unavailable`, …): the outcome is unknown; append the same
    ///   group again (see the module docs).
    pub async fn append(&self, group: &LogGroup, epoch: &Epoch) -> Result<Revision> {
        if epoch.create_revision <= 0 {
            return Err(Error::Log(yuebing_store::Error::InvalidParams {
                reason: format!(
                    "epoch {} of {:?} is no create revision",
                    epoch.create_revision, epoch.election_key
                ),
            }));
        }
        let mut appended = self.appended.lock().await;
        let last = match *appended {
            Some(a) if a.epoch == epoch.create_revision => a.last,
            _ => self.learn_end(&mut appended, epoch).await?,
        };
        let expected = last.saturating_add(1);
        if group.first() != expected {
            return Err(Error::LogGap {
                expected,
                found: group.first(),
            });
        }
        let key = self.group_key(group.first());
        let value = group.encode().map_err(Error::Log)?;
        let limits = GroupLimits::default();
        if value.len() > limits.max_bytes || group.entries().len() > limits.max_entries {
            return Err(Error::Log(yuebing_store::Error::InvalidParams {
                reason: format!(
                    "log group {}..={} takes {} bytes in {} entries, over the limits {limits:?} \
                     (cut it with split_groups)",
                    group.first(),
                    group.last(),
                    value.len(),
                    group.entries().len()
                ),
            }));
        }
        let resp = self.transact(&key, &value, epoch).await?;
        match outcome(&resp, &key, &value, group.first(), epoch) {
            Ok(revision) => {
                *appended = Some(Appended {
                    epoch: epoch.create_revision,
                    last: group.last(),
                });
                Ok(revision)
            }
            Err(e) => {
                if matches!(e, Error::LogConflict { .. }) {
                    // Someone else wrote here: what this log knows of the end is stale.
                    *appended = None;
                }
                Err(e)
            }
        }
    }

    /// Reads where the log ends and makes it the end this log appends after in `epoch`,
    /// returning the last sequence number (0: empty). A new leader calls this once it has
    /// caught up: its first group must start right after. (Without it, the first append of an
    /// epoch learns the end by itself.)
    pub async fn resume(&self, epoch: &Epoch) -> Result<u64> {
        let mut appended = self.appended.lock().await;
        self.learn_end(&mut appended, epoch).await
    }

    async fn learn_end(&self, appended: &mut Option<Appended>, epoch: &Epoch) -> Result<u64> {
        let last = self.last_seq().await?;
        *appended = Some(Appended {
            epoch: epoch.create_revision,
            last,
        });
        Ok(last)
    }

    /// The guarded put of `value` at `key`, reading the election key and the group key when
    /// the guard fails.
    async fn transact(&self, key: &str, value: &[u8], epoch: &Epoch) -> Result<TxnResponse> {
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    epoch.election_key.as_str(),
                    CompareOp::Equal,
                    epoch.create_revision,
                ),
                Compare::version(key, CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([
                TxnOp::get(epoch.election_key.as_str(), None),
                TxnOp::get(key, None),
            ]);
        let mut kv = self.client.kv_client();
        self.call("append", kv.txn(txn)).await
    }

    /// Cuts `entries` (consecutive) into groups within etcd's limits
    /// ([`GroupLimits::default`]) and appends them in order, returning the revision of the
    /// last. On an error, the groups before the failing one are in the log
    /// ([`EtcdLog::last_seq`] says where it ends).
    pub async fn append_entries(&self, entries: Vec<LogEntry>, epoch: &Epoch) -> Result<Revision> {
        let groups = split_groups(entries, GroupLimits::default()).map_err(Error::Log)?;
        if groups.is_empty() {
            return Err(Error::Log(yuebing_store::Error::InvalidParams {
                reason: "no log entries to append".into(),
            }));
        }
        let mut revision = 0;
        for g in &groups {
            revision = self.append(g, epoch).await?;
        }
        Ok(revision)
    }

    /// The last sequence number in the log: the last entry of the newest group, 0 when the log
    /// is empty. (etcd reads the whole log to sort it: one pass over the log on etcd's side;
    /// truncation keeps it short.)
    pub async fn last_seq(&self) -> Result<u64> {
        let options = GetOptions::new()
            .with_range(self.log_end())
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(1);
        let mut kv = self.client.kv_client();
        let resp = self
            .call("log last", kv.get(self.log_start(), Some(options)))
            .await?;
        match resp.kvs().first() {
            Some(found) => Ok(decode(&self.prefix, found.key(), found.value())?.last()),
            None => Ok(0),
        }
    }

    /// The log from the group that holds `seq` on, in order, with the etcd revision it was
    /// read at (watch from there with [`EtcdLog::watch_from`]). Empty when the log ends before
    /// `seq`. [`Error::LogTruncated`] when `seq` (0 counts as 1) was truncated away: bootstrap
    /// from a snapshot. Damage anywhere is [`Error::Log`] (`Corrupt`) and returns nothing.
    pub async fn read_from(&self, seq: u64) -> Result<(Vec<LogGroup>, Revision)> {
        read::read_from(self, seq).await
    }

    /// The groups appended after `revision` (from `revision + 1`), in log order, as they come.
    /// Deletions (truncation) are not reported. The stream ends after its first error: a
    /// damaged group ([`Error::Log`]), a revision etcd has compacted ([`Error::Compacted`]:
    /// read again with [`EtcdLog::read_from`]), or a broken or canceled watch.
    pub fn watch_from(&self, revision: Revision) -> BoxStream<'static, Result<LogGroup>> {
        watch::LogWatch::new(self, revision).into_stream()
    }

    /// Publishes that standby `standby_id` has applied the log up to `seq`, on `lease` (the
    /// standby's own: the entry goes when the standby does).
    pub async fn publish_applied(&self, standby_id: &str, seq: u64, lease: i64) -> Result<()> {
        standbys::publish(self, standby_id, seq, lease).await
    }

    /// The lowest sequence number the standbys published as applied; `None` when none is
    /// registered. An entry that is no sequence number is [`Error::BadValue`].
    pub async fn lowest_applied(&self) -> Result<Option<u64>> {
        Ok(standbys::lowest(self).await?.0)
    }

    /// Each registered standby's id and published position, with the etcd revision they were
    /// read at (for [`EtcdLog::truncate_as_leader`]). An entry that is no sequence number is
    /// left out, with a warning.
    pub async fn applied_positions_at(&self) -> Result<(Vec<(String, u64)>, Revision)> {
        standbys::positions(self).await
    }

    /// `<master>/log/`, where the log's keys start.
    fn log_start(&self) -> String {
        format!("{}/log/", self.prefix)
    }

    /// `<master>/log0`, the first key after the log's (`'0'` follows `'/'`).
    fn log_end(&self) -> String {
        format!("{}/log0", self.prefix)
    }

    /// `request` within the request timeout, its error typed.
    async fn call<T>(
        &self,
        op: &str,
        request: impl Future<Output = std::result::Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        timed(self.timeout, op, request).await
    }
}

/// The range end that makes `key` the last key of a range.
fn inclusive_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    end.push(0);
    end
}

/// Whether etcd refused a request because the revision it names was compacted.
fn is_compacted(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("required revision has been compacted"))
}

/// A log group read under `key`: its value decodes, and the key names its first entry.
fn decode(prefix: &str, key: &[u8], value: &[u8]) -> Result<LogGroup> {
    let name = String::from_utf8_lossy(key);
    let first = LogGroup::parse_key(prefix, &name)
        .ok_or_else(|| corrupt(&name, "a key under the log that names no sequence number"))?;
    let group = LogGroup::decode(&name, value).map_err(Error::Log)?;
    if group.first() != first {
        return Err(corrupt(
            &name,
            &format!("the group under it starts at seq {}", group.first()),
        ));
    }
    Ok(group)
}

/// The store's `Corrupt` for the log key `key`.
fn corrupt(key: &str, reason: &str) -> Error {
    Error::Log(yuebing_store::Error::Corrupt {
        path: key.to_string(),
        reason: reason.to_string(),
    })
}

/// What an append's transaction says: the revision it committed at, or why not.
fn outcome(resp: &TxnResponse, key: &str, value: &[u8], seq: u64, epoch: &Epoch) -> Result<i64> {
    let revision = || {
        resp.header()
            .map(|h| h.revision())
            .ok_or_else(|| Error::BadValue {
                key: key.to_string(),
                reason: "a transaction response without a header".into(),
            })
    };
    if resp.succeeded() {
        return revision();
    }
    // The else branch: the election key, then the group key.
    let ranges: Vec<&etcd_client::proto::PbRangeResponse> = resp
        .0
        .responses
        .iter()
        .filter_map(|r| match &r.response {
            Some(PbTxnOpResponse::ResponseRange(range)) => Some(range),
            _ => None,
        })
        .collect();
    let [leader, group] = ranges[..] else {
        return Err(Error::BadValue {
            key: key.to_string(),
            reason: format!(
                "a failed append answered {} reads, not 2",
                resp.0.responses.len()
            ),
        });
    };
    // A retry of an append that had committed finds its own bytes (they carry the epoch, so
    // they can only be this leader's), whatever became of the election key since: that is a
    // success, not `Deposed`.
    if let Some(kv) = group.kvs.first().filter(|kv| kv.value == value) {
        return Ok(kv.mod_revision);
    }
    let current = leader.kvs.first().map(|kv| kv.create_revision);
    if current != Some(epoch.create_revision) {
        return Err(Error::Deposed {
            key: epoch.election_key.clone(),
            epoch: epoch.create_revision,
            current,
        });
    }
    match group.kvs.first() {
        Some(_) => Err(Error::LogConflict { seq }),
        // Neither compare failed: etcd answered something else.
        None => Err(Error::BadValue {
            key: key.to_string(),
            reason: "the append's guard failed, yet the leader holds and the key is free".into(),
        }),
    }
}

/// The first page of a read: `resp`'s revision (the header's).
fn revision_of(resp: &GetResponse, what: &str) -> Result<Revision> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| Error::BadValue {
            key: what.to_string(),
            reason: "a response without a header".into(),
        })
}

#[cfg(test)]
mod tests;
