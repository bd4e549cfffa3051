//! [`Mode`]: the ways a caller makes a call, each measured with the same operations and load.

use std::sync::Arc;

use super::c_abi;
use super::load::{self, Window};
use super::ops::{self, Op};
use super::rig::Rig;
use crate::bench::harness::Sample;

/// How a call is made. To measure another way, add a variant, its name in
/// [`Mode::name`], its driver in `Mode::measure` (a blocking `extern "C"` call runs under
/// `load::threads`, one with a C callback under `load::chains`), and its targets in
/// `super::targets::TARGETS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Tasks on the bridge's runtime awaiting the async API: the baseline of the others.
    Async,
    /// The blocking methods (`BlockingClient`, `BlockingMaster`) from plain OS threads, one
    /// thread per call in flight.
    Blocking,
    /// The `*_call(..).then(cb)` forms, in closed-loop chains: each callback starts its
    /// chain's next call.
    Callback,
    /// The C ABI's blocking functions (`yuebing_store_get`, …) from plain threads.
    CAbi,
    /// The C ABI's `_async` functions with C callbacks, in closed-loop chains.
    CAbiCallback,
}

impl Mode {
    /// Every mode, the baseline first.
    pub const ALL: [Mode; 5] = [
        Mode::Async,
        Mode::Blocking,
        Mode::Callback,
        Mode::CAbi,
        Mode::CAbiCallback,
    ];

    /// What the others are compared against.
    pub const BASELINE: Mode = Mode::Async;

    /// The name in tables, JSON and `--modes`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Async => "async",
            Mode::Blocking => "blocking",
            Mode::Callback => "callback",
            Mode::CAbi => "c-abi",
            Mode::CAbiCallback => "c-abi-callback",
        }
    }

    /// Runs `op` in this mode with `inflight` calls in flight until `window` closes.
    pub(super) fn measure(
        self,
        rig: &Arc<Rig>,
        op: Op,
        inflight: usize,
        window: Arc<Window>,
    ) -> Result<Sample, String> {
        match self {
            Mode::Async => {
                let r = rig.clone();
                load::tasks(rig.bridge.handle(), inflight, window, move |w, seq| {
                    let r = r.clone();
                    async move { ops::call_async(&r, op, w, seq).await }
                })
            }
            Mode::Blocking => load::threads(inflight, &window, |w, seq| {
                ops::call_blocking(rig, op, w, seq)
            }),
            Mode::Callback => {
                let r = rig.clone();
                load::chains(inflight, window, move |w, seq, done| {
                    ops::call_then(&r, op, w, seq, done)
                })
            }
            Mode::CAbi => load::threads(inflight, &window, |w, seq| {
                c_abi::call_blocking(rig, op, w, seq)
            }),
            Mode::CAbiCallback => {
                let r = rig.clone();
                load::chains(inflight, window, move |w, seq, done| {
                    c_abi::call_then(&r, op, w, seq, done)
                })
            }
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mode {s:?} ({})", names.join(", "))
            })
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        assert!("c-api"
            .parse::<Mode>()
            .unwrap_err()
            .contains("c-abi-callback"));
    }
}
