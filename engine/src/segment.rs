//! Segment descriptors: what an engine publishes so peers can address its memory.
//!
//! A descriptor is versioned and carries the engine's instance id (new at every start), the
//! buffers it exported for remote access with their rights (local-only memory is never
//! published), and one opaque section per transport it serves (a transport added later, e.g. RDMA
//! with per-NIC keys, adds its own section without changing this type). It travels as JSON so that
//! an operator can read it where it is stored (etcd).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::location::Location;
use crate::memory::{Region, RemoteAccess};

/// The descriptor format this build writes and reads. Version 2 publishes only exported
/// buffers, each with its rights (`remote`).
pub const DESCRIPTOR_VERSION: u32 = 2;

/// Refuses a segment name that names nothing: an empty one, or one of blanks only. A segment
/// is looked up, opened and addressed by its name; such a name is a caller's mistake,
/// [`Error::InvalidArgument`] where it enters (`TransferEngine::open_segment`) rather than a
/// `SegmentNotFound` after a look-up.
pub fn check_name(name: &str) -> Result<(), Error> {
    match name.trim().is_empty() {
        true => Err(Error::invalid(format!("segment name {name:?} is empty"))),
        false => Ok(()),
    }
}

/// One exported buffer of a segment, as peers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferDesc {
    /// First byte, in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Where the memory lives.
    pub location: Location,
    /// What peers may do with it (never local-only in a published descriptor).
    pub remote: RemoteAccess,
}

impl From<Region> for BufferDesc {
    fn from(r: Region) -> Self {
        BufferDesc {
            addr: r.addr,
            len: r.len,
            location: r.location,
            remote: r.remote,
        }
    }
}

/// The published description of one engine's transferable memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentDescriptor {
    /// Format version ([`DESCRIPTOR_VERSION`]).
    pub version: u32,
    /// The segment's name (with embedded metadata: the engine's rpc `host:port`).
    pub name: String,
    /// Where the engine's control service listens.
    pub endpoint: String,
    /// Changes at every start of the engine; requests carry it and are refused on mismatch.
    pub instance_id: u64,
    /// Buffers exported for remote access, sorted by address.
    pub buffers: Vec<BufferDesc>,
    /// One section per transport served, keyed by transport name.
    pub transports: BTreeMap<String, serde_json::Value>,
}

impl SegmentDescriptor {
    /// A descriptor with no buffers or transports yet.
    pub fn new(name: impl Into<String>, endpoint: impl Into<String>, instance_id: u64) -> Self {
        SegmentDescriptor {
            version: DESCRIPTOR_VERSION,
            name: name.into(),
            endpoint: endpoint.into(),
            instance_id,
            buffers: Vec::new(),
            transports: BTreeMap::new(),
        }
    }

    /// A fresh, non-zero instance id.
    pub fn new_instance_id() -> u64 {
        fastrand::u64(1..)
    }

    /// Encodes as JSON.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes JSON, refusing other format versions and malformed input, buffers that overlap or
    /// end past the address space included.
    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| Error::invalid(format!("malformed segment descriptor: {e}")))?;
        let found = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| Error::invalid("segment descriptor without a version"))?;
        if found != u64::from(DESCRIPTOR_VERSION) {
            return Err(Error::VersionMismatch {
                found: u32::try_from(found).unwrap_or(u32::MAX),
                supported: DESCRIPTOR_VERSION,
            });
        }
        let mut d: SegmentDescriptor = serde_json::from_value(value)
            .map_err(|e| Error::invalid(format!("malformed segment descriptor: {e}")))?;
        d.buffers.sort_by_key(|b| b.addr);
        check_buffers(&d.buffers)?;
        Ok(d)
    }

    /// The buffers as regions with their rights, sorted by address (for
    /// [`crate::bounds::check_access`]).
    pub fn regions(&self) -> Vec<Region> {
        self.buffers
            .iter()
            .map(|b| Region {
                addr: b.addr,
                len: b.len,
                location: b.location,
                remote: b.remote,
                serial: 0,
            })
            .collect()
    }

    /// Refuses a request built for another instance of this segment.
    pub fn check_instance(&self, expected: u64) -> Result<(), Error> {
        if expected == self.instance_id {
            Ok(())
        } else {
            Err(Error::StaleSegment {
                segment: self.name.clone(),
                expected,
                actual: self.instance_id,
            })
        }
    }
}

/// Refuses buffers (sorted by address) that end past `u64::MAX` or overlap: peers check
/// accesses against them with [`crate::bounds::check_access`], which takes them as ranges that
/// end within `u64` and are disjoint.
fn check_buffers(buffers: &[BufferDesc]) -> Result<(), Error> {
    let mut prev_end = None;
    for b in buffers {
        let end = b.addr.checked_add(b.len).ok_or_else(|| {
            Error::invalid(format!(
                "segment descriptor: buffer {:#x} + {} ends past the address space",
                b.addr, b.len
            ))
        })?;
        if prev_end.is_some_and(|prev| b.addr < prev) {
            return Err(Error::invalid(format!(
                "segment descriptor: buffer {:#x} overlaps the one before",
                b.addr
            )));
        }
        prev_end = Some(end);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SegmentDescriptor {
        let mut d = SegmentDescriptor::new("127.0.0.1:7000", "127.0.0.1:7000", 42);
        d.buffers.push(BufferDesc {
            addr: 0x2000,
            len: 4096,
            location: Location::default(),
            remote: RemoteAccess::READ_WRITE,
        });
        d.buffers.push(BufferDesc {
            addr: 0x1000,
            len: 4096,
            location: Location::Cuda { device: 0 },
            remote: RemoteAccess::READ,
        });
        d.transports
            .insert("tcp".into(), serde_json::json!({"connections": 4}));
        d
    }

    #[test]
    fn json_round_trip_sorts_buffers() {
        let d = sample();
        let back = SegmentDescriptor::from_json(&d.to_json()).unwrap();
        assert_eq!(back.buffers[0].addr, 0x1000);
        assert_eq!(
            back.regions()[0].remote,
            RemoteAccess::READ,
            "rights travel"
        );
        assert_eq!(back.transports["tcp"]["connections"], 4);
        assert_eq!(back.instance_id, 42);
    }

    #[test]
    fn other_versions_and_garbage_are_refused() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        v["version"] = 9.into();
        let err = SegmentDescriptor::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(
            err,
            Error::VersionMismatch {
                found: 9,
                supported: DESCRIPTOR_VERSION
            }
        );
        // A version-1 descriptor published every registered buffer, without rights.
        v["version"] = 1.into();
        let err = SegmentDescriptor::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(err.code(), -3508);
        assert_eq!(
            SegmentDescriptor::from_json(b"{").unwrap_err().code(),
            -3001
        );
        assert_eq!(
            SegmentDescriptor::from_json(b"{}").unwrap_err().code(),
            -3001
        );
    }

    /// Regression (found by `segment_fuzz`): a buffer ending past `u64::MAX` decoded, and the
    /// access check against it (`Region::end`) overflowed, a panic in debug builds; overlapping
    /// buffers broke the check's assumption of disjoint ranges.
    #[test]
    fn buffers_past_the_address_space_or_overlapping_are_refused() {
        let with = |buffers: &[(u64, u64)]| {
            let mut d = sample();
            d.buffers = buffers
                .iter()
                .map(|&(addr, len)| BufferDesc {
                    addr,
                    len,
                    location: Location::default(),
                    remote: crate::memory::RemoteAccess::READ_WRITE,
                })
                .collect();
            SegmentDescriptor::from_json(&d.to_json())
        };
        let err = with(&[(u64::MAX - 1, 10)]).unwrap_err();
        assert_eq!(err.code(), -3001, "{err}");
        assert_eq!(
            with(&[(0x1000, 0x100), (0x10ff, 1)]).unwrap_err().code(),
            -3001
        );
        let ok = with(&[(u64::MAX - 10, 10), (0x1000, 0x100), (0x1100, 1)]).unwrap();
        assert!(crate::bounds::check_bounds(&ok.regions(), u64::MAX - 5, 5).is_ok());
        assert!(crate::bounds::check_bounds(&ok.regions(), u64::MAX - 5, 6).is_err());
    }

    #[test]
    fn an_empty_segment_name_is_an_invalid_argument_naming_it() {
        for name in ["", " \t"] {
            let err = check_name(name).unwrap_err();
            assert!(
                err.code() == -3001 && err.to_string().contains("segment name"),
                "{err}"
            );
        }
        assert!(check_name("127.0.0.1:7000").is_ok());
    }

    #[test]
    fn stale_instance_is_typed() {
        let d = sample();
        assert!(d.check_instance(42).is_ok());
        let e = d.check_instance(41).unwrap_err();
        assert_eq!(e.code(), -3204);
        assert!(e.is_retryable());
    }
}
