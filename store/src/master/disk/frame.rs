//! How the master's records sit in its files: a file header ([`crate::files`]), then frames
//! of `len: u32 LE | crc32: u32 LE | payload` (bincode).

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Header of an operation-log segment.
pub(crate) const LOG_MAGIC: &[u8; 8] = b"YBOPLOG\0";
/// Header of a snapshot file.
pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"YBSNAPS\0";

/// Appends one frame holding `value`.
pub(crate) fn write_frame<T: Serialize>(w: &mut impl Write, value: &T) -> io::Result<usize> {
    let payload = bincode::serialize(value).map_err(io::Error::other)?;
    let len = u32::try_from(payload.len()).map_err(|_| io::Error::other("frame over 4 GiB"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(&crc32fast::hash(&payload).to_le_bytes())?;
    w.write_all(&payload)?;
    Ok(8 + payload.len())
}

/// What reading one frame found.
pub(crate) enum Frame<T> {
    /// A complete, intact frame and its size on disk.
    Value(T, usize),
    /// Clean end of file.
    End,
    /// A partial or damaged frame (a torn write at the tail, or damage).
    Torn(String),
}

/// Reads one frame.
pub(crate) fn read_frame<T: DeserializeOwned>(r: &mut impl Read) -> io::Result<Frame<T>> {
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..])? {
            0 if got == 0 => return Ok(Frame::End),
            0 => return Ok(Frame::Torn("partial frame header".into())),
            n => got += n,
        }
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    // Any length `write_frame` makes (up to 4 GiB) reads back: the payload buffer grows only
    // as bytes actually arrive, so a damaged length cannot make it allocate wildly.
    let mut payload = Vec::new();
    r.take(u64::from(len)).read_to_end(&mut payload)?;
    if payload.len() < len as usize {
        return Ok(Frame::Torn("partial frame".into()));
    }
    if crc32fast::hash(&payload) != crc {
        return Ok(Frame::Torn("checksum mismatch".into()));
    }
    match bincode::deserialize(&payload) {
        Ok(v) => Ok(Frame::Value(v, 8 + payload.len())),
        Err(e) => Ok(Frame::Torn(format!("undecodable frame: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::{read_header, write_header};
    use crate::master::log::FORMAT_VERSION;

    #[test]
    fn frames_round_trip_and_damage_is_detected() {
        let mut buf = Vec::new();
        write_header(&mut buf, LOG_MAGIC, FORMAT_VERSION).unwrap();
        write_frame(&mut buf, &("a".to_string(), 1u64)).unwrap();
        write_frame(&mut buf, &("b".to_string(), 2u64)).unwrap();
        let mut r = &buf[..];
        assert!(read_header(&mut r, LOG_MAGIC, FORMAT_VERSION, "t").unwrap());
        assert!(
            matches!(read_frame::<(String, u64)>(&mut r).unwrap(), Frame::Value((ref s, 1), _) if s == "a")
        );
        assert!(matches!(
            read_frame::<(String, u64)>(&mut r).unwrap(),
            Frame::Value(_, _)
        ));
        assert!(matches!(
            read_frame::<(String, u64)>(&mut r).unwrap(),
            Frame::End
        ));
        // A torn tail.
        let cut = &buf[..buf.len() - 3];
        let mut r = &cut[12..];
        assert!(matches!(
            read_frame::<(String, u64)>(&mut r).unwrap(),
            Frame::Value(_, _)
        ));
        assert!(matches!(
            read_frame::<(String, u64)>(&mut r).unwrap(),
            Frame::Torn(_)
        ));
        // A flipped bit.
        let mut bad = buf.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let mut r = &bad[12..];
        read_frame::<(String, u64)>(&mut r).unwrap();
        assert!(matches!(
            read_frame::<(String, u64)>(&mut r).unwrap(),
            Frame::Torn(_)
        ));
        let mut r = &b"YBSNAPS\0\x01\0\0\0"[..];
        assert!(read_header(&mut r, LOG_MAGIC, FORMAT_VERSION, "t").is_err());
    }
}
