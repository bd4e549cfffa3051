//! Watching one segment's descriptor: its current state, then every change.
//!
//! The watcher reads the key once (the current state, at revision R), then watches it from
//! R + 1, so nothing between the read and the watch is missed. Puts yield `Some(descriptor)`,
//! deletions (a remove, an expired lease) yield `None`. A value that does not decode yields a
//! typed error and the watch goes on; a broken stream, a compacted revision or a watch etcd
//! canceled yield a typed error and end the stream. Nothing is spawned: the stream is polled by
//! its caller, and dropping it closes the watch.

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::{Client, WatchOptions, WatchStream};
use futures::stream::BoxStream;
use futures::StreamExt;
use yuebing_engine::SegmentDescriptor;

use crate::error::Error;
use crate::metadata::{decode, read, timed};

/// What the stream yields.
type Item = Result<Option<SegmentDescriptor>, yuebing_engine::Error>;

/// etcd's event types (mvccpb.Event.EventType).
pub(crate) const PUT: i32 = 0;
/// See [`PUT`].
pub(crate) const DELETE: i32 = 1;

/// The watch of one segment's key.
pub(crate) struct Watcher {
    client: Client,
    key: String,
    name: String,
    timeout: Duration,
    state: State,
}

enum State {
    /// Not yet read or watched.
    Start,
    /// Watching from `next_revision`; `ready` holds items decoded but not yet yielded.
    Watching {
        /// Boxed: the stream is large and the other states are empty.
        stream: Box<WatchStream>,
        next_revision: i64,
        ready: VecDeque<Item>,
    },
    /// Ended (after an error item).
    Done,
}

impl Watcher {
    /// A watch of `key`, where segment `name`'s descriptor lives; unary requests (the first
    /// read, opening the watch) have `timeout`.
    pub(crate) fn new(client: Client, key: String, name: String, timeout: Duration) -> Self {
        Watcher {
            client,
            key,
            name,
            timeout,
            state: State::Start,
        }
    }

    /// The watcher as a stream of items.
    pub(crate) fn into_stream<'a>(self) -> BoxStream<'a, Item> {
        futures::stream::unfold(self, |mut w| async move {
            let item = w.next().await?;
            Some((item, w))
        })
        .boxed()
    }

    /// The next item; `None` once the watch has ended.
    async fn next(&mut self) -> Option<Item> {
        loop {
            match &mut self.state {
                State::Done => return None,
                State::Start => {
                    return Some(match self.start().await {
                        Ok(first) => first,
                        Err(e) => {
                            self.state = State::Done;
                            Err(e.into())
                        }
                    })
                }
                State::Watching {
                    stream,
                    next_revision,
                    ready,
                } => {
                    if let Some(item) = ready.pop_front() {
                        return Some(item);
                    }
                    let message = stream.message().await;
                    match receive(&self.key, &self.name, message, next_revision, ready) {
                        Ok(()) => continue,
                        Err(e) => {
                            self.state = State::Done;
                            return Some(Err(e.into()));
                        }
                    }
                }
            }
        }
    }

    /// Reads the current state and opens the watch from the revision after it: the first
    /// item, or the error that ends the watch.
    async fn start(&mut self) -> Result<Item, Error> {
        let resp = read(&self.client, &self.key, self.timeout).await?;
        let revision = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| Error::BadValue {
                key: self.key.clone(),
                reason: "a response without a header".into(),
            })?;
        let current = resp.kvs().first().map(|kv| kv.value().to_vec());
        let options = WatchOptions::new().with_start_revision(revision.saturating_add(1));
        let mut watches = self.client.watch_client();
        let stream = timed(
            self.timeout,
            "watch",
            watches.watch(self.key.as_str(), Some(options)),
        )
        .await?;
        self.state = State::Watching {
            stream: Box::new(stream),
            next_revision: revision.saturating_add(1),
            ready: VecDeque::new(),
        };
        // An undecodable current value is an error item; the watch goes on.
        Ok(match current {
            Some(value) => decode(&self.key, &self.name, &value).map(Some),
            None => Ok(None),
        })
    }
}

/// One message of a watch stream (watching from revision `from`) as a response that carries
/// events, or the error that ends the watch: the stream ended or broke, etcd cancelled it, or
/// the history from `from` was compacted away.
pub(crate) fn checked(
    message: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
    from: i64,
) -> Result<etcd_client::WatchResponse, Error> {
    let resp = match message {
        Ok(Some(resp)) => resp,
        Ok(None) => {
            return Err(Error::Unavailable {
                reason: "the watch stream ended".into(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    if resp.canceled() {
        return Err(if resp.compact_revision() > 0 {
            Error::Compacted {
                requested: from,
                compacted: resp.compact_revision(),
            }
        } else {
            Error::WatchCanceled {
                reason: resp.cancel_reason().to_string(),
            }
        });
    }
    Ok(resp)
}

/// Turns one watch response into items in `ready`; an error ends the watch.
fn receive(
    key: &str,
    name: &str,
    message: Result<Option<etcd_client::WatchResponse>, etcd_client::Error>,
    next_revision: &mut i64,
    ready: &mut VecDeque<Item>,
) -> Result<(), Error> {
    let resp = checked(message, *next_revision)?;
    for event in resp.events() {
        // The raw type: etcd-client's `event_type()` panics on one it does not know.
        let kind = event.0.r#type;
        let Some(kv) = event.kv() else {
            ready.push_back(Err(bad(key, "an event without a key-value")));
            continue;
        };
        *next_revision = (*next_revision).max(kv.mod_revision().saturating_add(1));
        ready.push_back(match kind {
            PUT => decode(key, name, kv.value()).map(Some),
            DELETE => Ok(None),
            other => Err(bad(key, &format!("unknown event type {other}"))),
        });
    }
    Ok(())
}

fn bad(key: &str, reason: &str) -> yuebing_engine::Error {
    Error::BadValue {
        key: key.to_string(),
        reason: reason.to_string(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbEvent, PbKeyValue, PbWatchResponse};
    use etcd_client::WatchResponse;

    const KEY: &str = "/yuebing/c/segments/a";

    fn event(kind: i32, value: &[u8], revision: i64) -> PbEvent {
        PbEvent {
            r#type: kind,
            kv: Some(PbKeyValue {
                key: KEY.as_bytes().to_vec(),
                value: value.to_vec(),
                mod_revision: revision,
                ..PbKeyValue::default()
            }),
            prev_kv: None,
        }
    }

    fn run(resp: PbWatchResponse, next: &mut i64) -> (Result<(), Error>, Vec<Item>) {
        let mut ready = VecDeque::new();
        let result = receive(KEY, "a", Ok(Some(WatchResponse(resp))), next, &mut ready);
        (result, ready.into_iter().collect())
    }

    #[test]
    fn events_become_items_in_order_and_advance_the_revision() {
        let d = SegmentDescriptor::new("a", "a", 3);
        let resp = PbWatchResponse {
            events: vec![
                event(PUT, &d.to_json(), 7),
                event(PUT, b"garbage", 8),
                event(7, b"", 9),
                event(DELETE, b"", 10),
            ],
            ..PbWatchResponse::default()
        };
        let mut next = 5;
        let (result, items) = run(resp, &mut next);
        result.unwrap();
        assert_eq!(next, 11);
        assert_eq!(items[0], Ok(Some(d)));
        assert_eq!(items[1].as_ref().unwrap_err().code(), -5009);
        assert_eq!(items[2].as_ref().unwrap_err().code(), -5009, "unknown type");
        assert_eq!(items[3], Ok(None));
        let no_kv = PbWatchResponse {
            events: vec![PbEvent::default()],
            ..PbWatchResponse::default()
        };
        let (result, items) = run(no_kv, &mut next);
        result.unwrap();
        assert_eq!(items[0].as_ref().unwrap_err().code(), -5009);
    }

    #[test]
    fn compaction_cancellation_and_a_broken_stream_end_the_watch() {
        let mut next = 5;
        let compacted = PbWatchResponse {
            canceled: true,
            compact_revision: 9,
            ..PbWatchResponse::default()
        };
        let err = run(compacted, &mut next).0.unwrap_err();
        assert_eq!(
            err,
            Error::Compacted {
                requested: 5,
                compacted: 9
            }
        );
        assert!(err.is_retryable());
        let canceled = PbWatchResponse {
            canceled: true,
            cancel_reason: "no leader".into(),
            ..PbWatchResponse::default()
        };
        assert_eq!(run(canceled, &mut next).0.unwrap_err().code(), -5008);
        let mut ready = VecDeque::new();
        let ended = receive(KEY, "a", Ok(None), &mut next, &mut ready).unwrap_err();
        assert_eq!(ended.code(), -5002);
        let broken = etcd_client::Error::WatchError("reset".into());
        let err = receive(KEY, "a", Err(broken), &mut next, &mut ready).unwrap_err();
        assert_eq!(err.code(), -5002);
        let huge = PbWatchResponse {
            events: vec![event(DELETE, b"", i64::MAX)],
            ..PbWatchResponse::default()
        };
        run(huge, &mut next).0.unwrap();
        assert_eq!(next, i64::MAX, "no overflow on etcd's numbers");
    }
}
