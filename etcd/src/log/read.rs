//! Reading the log from a sequence number on, at one etcd revision, page by page.
//!
//! First the newest group that starts at or before `seq` (a descending range read, limit 1;
//! etcd reads the whole range to sort it, so first only over the [`WINDOW`] sequence numbers
//! before `seq`, which holds it when groups keep to `GroupLimits::default()`): its header's
//! revision R is the revision of the whole read, and every later page is read at
//! R, so the result is one consistent cut of the log even while the leader appends or
//! truncates. Then pages of [`PAGE`] keys from that group (or, if it ends before `seq`, from
//! `seq`'s key) to the end of the log. Every group is decoded and checked, and the run must be
//! contiguous ([`Run`]).

use etcd_client::{GetOptions, GetResponse, KvClient, SortOrder, SortTarget};
use yuebing_store::master::ha::LogGroup;

use super::{
    corrupt, decode, inclusive_end, is_compacted, revision_of, EtcdLog, Revision, PAGE, WINDOW,
};
use crate::error::{Error, Result};

pub(super) async fn read_from(log: &EtcdLog, seq: u64) -> Result<(Vec<LogGroup>, Revision)> {
    let seq = seq.max(1);
    let here = LogGroup::key(&log.prefix, seq);
    let mut kv = log.client.kv_client();
    // etcd sorts a range by reading all of it: look near seq first. A group of at most
    // WINDOW entries that holds seq, or ends right before it, starts in the window.
    let near = LogGroup::key(&log.prefix, seq.saturating_sub(WINDOW).max(1));
    let mut resp = newest_up_to(log, &mut kv, near, &here).await?;
    if resp.kvs().is_empty() {
        // Nothing near: the log starts after seq, ends well before it, or has a group
        // larger than the limits; look at all of it.
        resp = newest_up_to(log, &mut kv, log.log_start(), &here).await?;
    }
    let revision = revision_of(&resp, &here)?;
    let mut run = Run::new(seq);
    let mut from = match resp.kvs().first() {
        Some(found) => {
            let group = decode(&log.prefix, found.key(), found.value())?;
            if group.last() >= seq {
                found.key().to_vec()
            } else {
                // The log ends before seq, or a later group would leave a gap.
                run.follows(&group);
                here.into_bytes()
            }
        }
        None => log.log_start().into_bytes(),
    };
    let mut groups = Vec::new();
    loop {
        let options = GetOptions::new()
            .with_range(log.log_end())
            .with_revision(revision)
            .with_limit(PAGE);
        let resp = match tokio::time::timeout(log.timeout, kv.get(from, Some(options))).await {
            Ok(Ok(resp)) => resp,
            // Compacted between two pages: read again.
            Ok(Err(e)) if is_compacted(&e) => {
                return Err(Error::Compacted {
                    requested: revision,
                    compacted: revision,
                })
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                return Err(Error::Timeout {
                    op: "log read".into(),
                    after: log.timeout,
                })
            }
        };
        for found in resp.kvs() {
            let group = decode(&log.prefix, found.key(), found.value())?;
            run.check(&String::from_utf8_lossy(found.key()), &group)?;
            groups.push(group);
        }
        match (resp.more(), resp.kvs().last()) {
            (true, Some(last)) => from = inclusive_end(last.key()),
            _ => break,
        }
    }
    Ok((groups, revision))
}

/// The newest group whose key lies in [`from`, `upto`], at the current revision.
async fn newest_up_to(
    log: &EtcdLog,
    kv: &mut KvClient,
    from: String,
    upto: &str,
) -> Result<GetResponse> {
    let options = GetOptions::new()
        .with_range(inclusive_end(upto.as_bytes()))
        .with_sort(SortTarget::Key, SortOrder::Descend)
        .with_limit(1);
    log.call("log read", kv.get(from, Some(options))).await
}

/// Checks that groups read from `seq` on form one run: the first holds `seq` (or follows the
/// group before it), each next one starts right after the one before.
#[derive(Debug)]
pub(super) struct Run {
    /// The sequence number asked for.
    seq: u64,
    /// The first sequence number the next group must have; `None` before the first group.
    next: Option<u64>,
}

impl Run {
    pub(super) fn new(seq: u64) -> Run {
        Run { seq, next: None }
    }

    /// The run continues `group` (read, but not returned: it ends before `seq`).
    pub(super) fn follows(&mut self, group: &LogGroup) {
        self.next = Some(group.last().saturating_add(1));
    }

    /// Takes the next group, read under `key`.
    pub(super) fn check(&mut self, key: &str, group: &LogGroup) -> Result<()> {
        match self.next {
            None if group.first() > self.seq => {
                return Err(Error::LogTruncated {
                    seq: self.seq,
                    first: group.first(),
                })
            }
            Some(next) if group.first() != next => {
                return Err(corrupt(
                    key,
                    &format!("a gap in the log: seq {next} expected here"),
                ))
            }
            _ => {}
        }
        self.next = Some(group.last().saturating_add(1));
        Ok(())
    }
}
