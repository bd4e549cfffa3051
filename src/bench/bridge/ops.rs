//! [`Op`]: the calls measured, and one call of each in each way of calling: awaited, blocking,
//! and with a callback. The three forms do the same work with the same arguments.

use super::load::Done;
use super::rig::{Rig, LARGE, SMALL};

/// An operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// The master's `health`: a no-op rpc, the bridge's round-trip cost alone.
    Health,
    /// A 4 KiB `put` under a fresh key (the keys are removed, untimed, after the measurement).
    Put,
    /// A 4 KiB `get` of a preloaded object.
    Get,
    /// A 1 MiB `get_into` of a preloaded object, into registered memory (one slot per call in
    /// flight).
    GetInto,
}

impl Op {
    /// Every operation, in table order.
    pub const ALL: [Op; 4] = [Op::Health, Op::Put, Op::Get, Op::GetInto];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Op::Health => "health",
            Op::Put => "put 4KiB",
            Op::Get => "get 4KiB",
            Op::GetInto => "get_into 1MiB",
        }
    }
}

/// A failed call, as the bench reports it: the error and its code.
pub(super) fn err(e: impl Into<yuebing_bridge::Error>) -> String {
    let e = e.into();
    format!("{e} (code {})", e.code())
}

/// Checks that a read brought the whole object.
pub(super) fn whole(got: usize, want: usize) -> Result<(), String> {
    match got == want {
        true => Ok(()),
        false => Err(format!("read {got} bytes, expected {want}")),
    }
}

/// One call of `op`, awaited (by call `seq` of worker `w`).
pub(super) async fn call_async(rig: &Rig, op: Op, w: usize, seq: u64) -> Result<(), String> {
    let (c, o) = (rig.client.client(), &rig.opts);
    match op {
        Op::Health => rig.admin.master().health().await.map(drop).map_err(err),
        Op::Put => c.put(&rig.put_key(), &rig.value, o).await.map_err(err),
        Op::Get => whole(
            c.get(rig.small_key(seq), o).await.map_err(err)?.len(),
            SMALL,
        ),
        Op::GetInto => {
            let (addr, len) = rig.slot(w);
            let got = c.get_into(rig.large_key(seq), addr, len, o).await;
            whole(got.map_err(err)? as usize, LARGE)
        }
    }
}

/// One call of `op` through the blocking facade.
pub(super) fn call_blocking(rig: &Rig, op: Op, w: usize, seq: u64) -> Result<(), String> {
    let (c, o) = (&rig.client, &rig.opts);
    match op {
        Op::Health => rig.admin.health().map(drop).map_err(err),
        Op::Put => c.put(rig.put_key(), &rig.value, o).map_err(err),
        Op::Get => whole(c.get(rig.small_key(seq), o).map_err(err)?.len(), SMALL),
        Op::GetInto => {
            let (addr, len) = rig.slot(w);
            let got = c.get_into(rig.large_key(seq), addr, len, o);
            whole(got.map_err(err)? as usize, LARGE)
        }
    }
}

/// Starts one call of `op` as a [`Call`](yuebing_bridge::Call); `done` gets the outcome on the callback pool.
pub(super) fn call_then(rig: &Rig, op: Op, w: usize, seq: u64, done: Done) {
    let (c, o) = (&rig.client, &rig.opts);
    match op {
        Op::Health => rig
            .admin
            .health_call()
            .then(move |r| done(r.map(drop).map_err(err))),
        Op::Put => c
            .call(|c| c.put(rig.put_key(), &rig.value, o))
            .then(move |r| done(r.map_err(err))),
        Op::Get => c
            .call(|c| c.get(rig.small_key(seq), o))
            .then(move |r| done(r.map_err(err).and_then(|v| whole(v.len(), SMALL)))),
        Op::GetInto => {
            let (addr, len) = rig.slot(w);
            c.call(|c| c.get_into(rig.large_key(seq), addr, len, o))
                .then(move |r| done(r.map_err(err).and_then(|n| whole(n as usize, LARGE))))
        }
    }
}
