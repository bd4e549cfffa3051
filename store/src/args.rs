//! The checks of a call's arguments, in one place for both sides: the client makes them where a
//! call enters, before any round trip (so a bad argument costs no call and leaves no lease or
//! write behind), and the master makes them again on what arrives. Each refusal is
//! [`Error::InvalidParams`] (-600) naming the argument, the same on either side.

use crate::error::{Error, Result};
use crate::master::types::PutConfig;

/// A key: not empty. (The master also bounds its length, by its own configuration.)
pub fn key(key: &str) -> Result<()> {
    match key.is_empty() {
        true => Err(Error::params("key is empty")),
        false => Ok(()),
    }
}

/// An object's size: at least one byte.
pub fn size(size: u64) -> Result<()> {
    match size {
        0 => Err(Error::params(
            "size is 0: an object holds at least one byte",
        )),
        _ => Ok(()),
    }
}

/// A node's (its engine segment's) name, `what` in messages: the engine's rule
/// ([`yuebing_engine::segment::check_name`]: not empty, not blank), as `InvalidParams`.
pub fn node(name: &str, what: &str) -> Result<()> {
    yuebing_engine::segment::check_name(name)
        .map_err(|_| Error::params(format!("{what} {name:?} is empty")))
}

/// Replica settings: at least one replica, and preferred nodes that name one.
pub fn put_config(cfg: &PutConfig) -> Result<()> {
    if cfg.replica_num == 0 {
        return Err(Error::params("replica_num is 0"));
    }
    for (i, name) in cfg.preferred.iter().enumerate() {
        node(name, &format!("preferred[{i}]"))?;
    }
    Ok(())
}

/// A caller's buffer `[addr, addr + len)`: not at address 0 (NULL), not empty, not past the
/// end of the address space.
pub fn buffer(addr: u64, len: u64) -> Result<()> {
    if addr == 0 {
        return Err(Error::params("addr is 0 (NULL)"));
    }
    if len == 0 {
        return Err(Error::params("len is 0: a buffer holds at least one byte"));
    }
    if addr.checked_add(len).is_none() {
        return Err(Error::params(format!(
            "addr {addr:#x} + len {len} overflows the address space"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_argument() {
        let named = |r: Result<()>, what: &str| {
            let e = r.unwrap_err();
            assert!(e.code() == -600 && e.to_string().contains(what), "{e}");
        };
        named(key(""), "key");
        named(size(0), "size");
        let none = PutConfig {
            replica_num: 0,
            ..PutConfig::default()
        };
        named(put_config(&none), "replica_num");
        let nameless = PutConfig {
            preferred: vec![String::new()],
            ..PutConfig::default()
        };
        named(put_config(&nameless), "preferred[0]");
        // Blank is empty, as the engine (and Python) has it: one rule for a node's name.
        let blank = PutConfig {
            preferred: vec!["n1".into(), "  ".into()],
            ..PutConfig::default()
        };
        named(put_config(&blank), "preferred[1]");
        named(node(" ", "node name"), "node name");
        named(buffer(0, 1), "addr");
        named(buffer(8, 0), "len");
        named(buffer(u64::MAX, 1), "overflows");
        assert!(key("k").is_ok() && size(1).is_ok() && put_config(&PutConfig::default()).is_ok());
        assert!(buffer(u64::MAX - 1, 1).is_ok(), "ends exactly at u64::MAX");
    }
}
