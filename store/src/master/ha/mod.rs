//! The pure parts of high availability (issue 16), driven by an etcd adapter: the operation
//! log as groups of framed entries under ordered keys ([`group`]), a standby's tail that
//! applies them in order and fails closed on a gap or damage ([`tail`]), and when a leader may
//! still act on its lease ([`lease`]), and the snapshot a leader offers to standbys that
//! bootstrap ([`bootstrap`], whose `fetch` is the one piece that calls out, over a
//! `MasterClient`).

pub mod bootstrap;
pub mod group;
pub mod lease;
pub mod snapshot_dir;
pub mod tail;

pub use self::bootstrap::{Offered, SnapshotChunk};
pub use self::group::{split_groups, GroupLimits, LogGroup};
pub use self::lease::LeaderLease;
pub use self::snapshot_dir::SnapshotDir;
pub use self::tail::Tail;
