//! One object as it sits in a segment file: a fixed head, the key, then the value.
//!
//! ```text
//! 0   magic      "YBOB"
//! 4   key_len    u32 LE
//! 8   value_len  u64 LE
//! 16  tag        16 bytes (what the master calls this replica; opaque here)
//! 32  value_crc  u32 LE   crc32 of the value
//! 36  head_crc   u32 LE   crc32 of bytes 0..36 and of the key
//! 40  key, then value
//! ```
//! The head is checked before anything it declares is read ([`Head::check`]): a head that is
//! cut short needs more bytes, a head whose checksum fails is damage (or a torn append), and
//! only a checked head's lengths are trusted. The value's checksum is checked on every read, so
//! bytes that rotted or were torn after the head reached the disk are never served.

use super::Tag;

/// Bytes of a record's head.
pub(crate) const HEAD_LEN: usize = 40;
const MAGIC: &[u8; 4] = b"YBOB";
/// Longest key a record holds (the store's own keys are far shorter).
pub(crate) const MAX_KEY_LEN: usize = 64 << 10;

/// A record's head, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) key_len: u32,
    pub(crate) value_len: u64,
    pub(crate) tag: Tag,
    pub(crate) value_crc: u32,
    head_crc: u32,
}

/// What checking a head found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// An intact head.
    Head(Head),
    /// Fewer than [`HEAD_LEN`] bytes: the end of the file, or an append cut short.
    Short,
    /// Not a record head: damage, or an append torn before its head reached the disk.
    Damaged(&'static str),
}

impl Head {
    /// The head of a record of `key` and a value of `value_len` bytes with checksum
    /// `value_crc`.
    pub(crate) fn new(key: &[u8], value_len: u64, tag: Tag, value_crc: u32) -> Head {
        let mut head = Head {
            key_len: key.len() as u32,
            value_len,
            tag,
            value_crc,
            head_crc: 0,
        };
        head.head_crc = head.crc(key);
        head
    }

    /// The head's bytes.
    pub(crate) fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&self.key_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.value_len.to_le_bytes());
        b[16..32].copy_from_slice(&self.tag.0);
        b[32..36].copy_from_slice(&self.value_crc.to_le_bytes());
        b[36..40].copy_from_slice(&self.head_crc.to_le_bytes());
        b
    }

    /// Checks the head at the start of `bytes`, whose key follows it (the key is read with
    /// the head: its checksum covers both). `bytes` may be longer than the record.
    pub(crate) fn check(bytes: &[u8]) -> Checked {
        let Some(b) = bytes.get(..HEAD_LEN) else {
            return Checked::Short;
        };
        if &b[..4] != MAGIC {
            return Checked::Damaged("no record starts here");
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut value_len = [0u8; 8];
        value_len.copy_from_slice(&b[8..16]);
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&b[16..32]);
        let head = Head {
            key_len: word(4),
            value_len: u64::from_le_bytes(value_len),
            tag: Tag(tag),
            value_crc: word(32),
            head_crc: word(36),
        };
        if head.key_len as usize > MAX_KEY_LEN {
            return Checked::Damaged("key longer than any record holds");
        }
        let Some(key) = bytes.get(HEAD_LEN..HEAD_LEN + head.key_len as usize) else {
            return Checked::Short;
        };
        if head.crc(key) != head.head_crc {
            return Checked::Damaged("record head checksum mismatch");
        }
        Checked::Head(head)
    }

    /// The record's key in `bytes` (which start with this head).
    pub(crate) fn key<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[HEAD_LEN..HEAD_LEN + self.key_len as usize]
    }

    fn crc(&self, key: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(MAGIC);
        h.update(&self.key_len.to_le_bytes());
        h.update(&self.value_len.to_le_bytes());
        h.update(&self.tag.0);
        h.update(&self.value_crc.to_le_bytes());
        h.update(key);
        h.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &[u8], value: &[u8]) -> Vec<u8> {
        let head = Head::new(
            key,
            value.len() as u64,
            Tag([7; 16]),
            crc32fast::hash(value),
        );
        [&head.encode()[..], key, value].concat()
    }

    #[test]
    fn a_record_reads_back_and_every_damage_to_its_head_is_found() {
        let bytes = record(b"key-1", b"value");
        let Checked::Head(head) = Head::check(&bytes) else {
            panic!("an intact head")
        };
        assert_eq!(head.key(&bytes), b"key-1");
        assert_eq!((head.value_len, head.tag), (5, Tag([7; 16])));
        // Every cut before the end of the key needs more bytes.
        for cut in 0..HEAD_LEN + 5 {
            assert_eq!(Head::check(&bytes[..cut]), Checked::Short, "cut at {cut}");
        }
        // Every flipped bit of the head or key is damage.
        for at in 0..HEAD_LEN + 5 {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[at] ^= 1 << bit;
                assert!(
                    matches!(Head::check(&bad), Checked::Damaged(_) | Checked::Short),
                    "flip at {at} bit {bit} passed"
                );
            }
        }
    }

    #[test]
    fn a_declared_key_longer_than_allowed_is_damage_not_a_read() {
        let mut bytes = record(b"k", b"v");
        bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Head::check(&bytes), Checked::Damaged(_)));
    }
}
