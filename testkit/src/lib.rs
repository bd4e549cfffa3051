//! yuebing-testkit: what yuebing's tests share, in one crate every other crate takes as a
//! dev-dependency (as raft-rs keeps its `harness`).
//!
//! It depends on no yuebing crate, so yuebing-rpc, at the bottom, can use it as well as the root
//! package at the top. What only one crate's tests need stays in that crate's `tests/common`.
//!
//! # Layout
//! - [`eventually`]: waiting by polling for a condition to hold, with a ceiling, never a bare
//!   sleep ([`eventually()`]; [`eventually::blocking`] on a plain thread; [`Outcome`], what a
//!   check returns).
//! - [`ports`]: ports on 127.0.0.1 that were free a moment ago and are never handed out twice.
//! - [`patterns`]: deterministic bytes for objects and buffers, different for each seed.
//! - [`gate`]: [`Switch`], a serve gate a test opens and closes.
//! - [`alloc`]: [`Counting`](alloc::Counting), a global allocator that counts, the
//!   [`install_counting_allocator!`] macro each test binary invokes to install it, and
//!   [`measure`](alloc::measure), the peak a closure allocated on its thread.
//! - `fuzz` (feature `fuzz`): proptest strategies that mutate valid encodings (bit flips,
//!   truncations, insertions, length fields made huge), and the fuzz tests' settings.
//! - [`process`]: [`process::Guard`], a child process killed and reaped when dropped and killed
//!   by the kernel when the test process dies; [`process::signal`] (a SIGSTOP that returns once
//!   the process is stopped); [`process::alone`], a test body run in a process of its own.
//! - [`error`]: the kit's [`Error`].
//! - `etcd` (feature `etcd`): real etcd members on 127.0.0.1 (`EtcdServer`, `EtcdCluster`), a
//!   TCP proxy that cuts a client off (`TcpProxy`), and the etcd binary they run
//!   (`etcd_binary`).
//!
//! # The counting allocator
//! A global allocator belongs to one binary, and `cargo test --workspace` builds each crate's
//! tests with the features of all of them: this crate therefore never installs one itself. A
//! crate whose unit tests measure allocations installs it in its own test binary, at the root of
//! its `lib.rs` (there behind `#[cfg(test)]`):
//!
//! ```
//! yuebing_testkit::install_counting_allocator!();
//!
//! fn main() {
//!     let (v, peak) = yuebing_testkit::alloc::measure(|| vec![0u8; 1000]);
//!     assert_eq!((v.len(), peak), (1000, 1000));
//! }
//! ```

pub mod alloc;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod eventually;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod gate;
pub mod patterns;
pub mod ports;
pub mod process;

pub use error::{Error, Result};
pub use eventually::{eventually, Outcome};
pub use gate::Switch;

#[cfg(test)]
install_counting_allocator!();
