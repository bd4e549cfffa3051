//! Watching the log for new groups: a watch on the log's key range from a revision on, puts
//! only (truncation's deletions are filtered out by etcd).
//!
//! etcd delivers events in revision order, which is log order (each group is one
//! transaction, appended after the one before). The stream ends after its first error: a
//! damaged group (a standby must not skip one), a compacted start revision, a canceled or
//! broken watch. Nothing is spawned: the caller polls the stream; dropping it closes the watch.

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::{Client, WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use futures::stream::BoxStream;
use futures::StreamExt;
use yuebing_store::master::ha::LogGroup;

use super::{decode, EtcdLog, Revision};
use crate::error::{Error, Result};
use crate::metadata::timed;
use crate::watch::{DELETE, PUT};

/// The watch of the log from a revision on.
pub(super) struct LogWatch {
    client: Client,
    prefix: String,
    start: String,
    end: String,
    /// The first revision to report.
    from: i64,
    timeout: Duration,
    state: State,
}

enum State {
    /// Not watching yet.
    Start,
    /// Watching; `ready` holds items not yet yielded; `ending` once an error is queued.
    Watching {
        /// Boxed: the stream is large and the other states are empty.
        stream: Box<WatchStream>,
        ready: VecDeque<Result<LogGroup>>,
        ending: bool,
    },
    /// Ended.
    Done,
}

impl LogWatch {
    /// A watch of `log`'s groups from `revision + 1` on.
    pub(super) fn new(log: &EtcdLog, revision: Revision) -> Self {
        LogWatch {
            client: log.client.clone(),
            prefix: log.prefix.clone(),
            start: log.log_start(),
            end: log.log_end(),
            from: revision.max(0).saturating_add(1),
            timeout: log.timeout,
            state: State::Start,
        }
    }

    /// The watch as a stream of groups.
    pub(super) fn into_stream(self) -> BoxStream<'static, Result<LogGroup>> {
        futures::stream::unfold(self, |mut w| async move {
            let item = w.next().await?;
            Some((item, w))
        })
        .boxed()
    }

    /// The next item; `None` once the watch has ended.
    async fn next(&mut self) -> Option<Result<LogGroup>> {
        loop {
            match &mut self.state {
                State::Done => return None,
                State::Start => match self.open().await {
                    Ok(stream) => {
                        self.state = State::Watching {
                            stream: Box::new(stream),
                            ready: VecDeque::new(),
                            ending: false,
                        }
                    }
                    Err(e) => {
                        self.state = State::Done;
                        return Some(Err(e));
                    }
                },
                State::Watching {
                    stream,
                    ready,
                    ending,
                } => {
                    if let Some(item) = ready.pop_front() {
                        return Some(item);
                    }
                    if *ending {
                        self.state = State::Done;
                        return None;
                    }
                    let message = stream.message().await;
                    if let Err(e) = receive(&self.prefix, self.from, message, ready) {
                        ready.push_back(Err(e));
                        *ending = true;
                    }
                }
            }
        }
    }

    async fn open(&self) -> Result<WatchStream> {
        let options = WatchOptions::new()
            .with_range(self.end.as_str())
            .with_start_revision(self.from)
            .with_filters([WatchFilterType::NoDelete]);
        let mut watches = self.client.watch_client();
        timed(
            self.timeout,
            "log watch",
            watches.watch(self.start.as_str(), Some(options)),
        )
        .await
    }
}

/// Turns one watch response into groups in `ready`, in order; the error that ends the watch
/// (after the groups before it).
pub(super) fn receive(
    prefix: &str,
    from: i64,
    message: std::result::Result<Option<WatchResponse>, etcd_client::Error>,
    ready: &mut VecDeque<Result<LogGroup>>,
) -> Result<()> {
    let resp = crate::watch::checked(message, from)?;
    for event in resp.events() {
        // The raw type: etcd-client's `event_type()` panics on one it does not know.
        match event.0.r#type {
            PUT => {}
            DELETE => continue,
            other => {
                return Err(Error::BadValue {
                    key: prefix.to_string(),
                    reason: format!("a log watch event of unknown type {other}"),
                })
            }
        }
        let Some(kv) = event.kv() else {
            return Err(Error::BadValue {
                key: prefix.to_string(),
                reason: "a log watch event without a key-value".into(),
            });
        };
        ready.push_back(Ok(decode(prefix, kv.key(), kv.value())?));
    }
    Ok(())
}
