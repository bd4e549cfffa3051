//! Segment files: their names, their header, and the scan that finds the records of one when a
//! disk tier opens.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use super::index::Location;
use super::record::{Checked, Head, HEAD_LEN, MAX_KEY_LEN};
use crate::error::{Error, Result};
use crate::files::{io_err, numbered, read_header, write_header, HEADER_LEN};

/// A segment file's magic.
pub(crate) const MAGIC: &[u8; 8] = b"YBDTIER\0";
/// The format of segment files and their records.
pub(crate) const FORMAT_VERSION: u32 = 1;

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".ydt";

/// The file name of segment `n`.
pub(crate) fn name(n: u64) -> String {
    format!("{PREFIX}{n:020}{SUFFIX}")
}

/// Writes a new segment's header.
pub(crate) fn write_segment_header(w: &mut impl io::Write) -> io::Result<()> {
    write_header(w, MAGIC, FORMAT_VERSION)
}

/// What a scan of one segment found.
#[derive(Debug, Default)]
pub(crate) struct Scanned {
    /// The intact records, in file order: each object's key and where its record is.
    pub(crate) records: Vec<(String, Location)>,
    /// Where the intact records end: the file's length, unless it ends in damage.
    pub(crate) good_end: u64,
    /// What ended the scan before the end of the file, if anything did.
    pub(crate) damage: Option<String>,
}

/// Reads segment `n` at `path` from its header to its end, checking every record. A record that is cut short
/// or whose checksums fail ends the scan there (a record's length is only known from an intact
/// head, so nothing after it can be found).
pub(crate) fn scan(n: u64, path: &Path) -> Result<Scanned> {
    let file = File::open(path).map_err(|e| io_err(path, e))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let shown = path.display().to_string();
    // A segment of another format version is refused (it may be a newer yuebing's); a
    // header that is short or not a segment's is damage like any other.
    let damage = match read_header(&mut r, MAGIC, FORMAT_VERSION, &shown) {
        Ok(true) => None,
        Ok(false) => Some("shorter than a segment header".to_string()),
        Err(Error::Corrupt { reason, .. }) => Some(reason),
        Err(e) => return Err(e),
    };
    if damage.is_some() {
        return Ok(Scanned {
            damage,
            ..Scanned::default()
        });
    }
    let mut out = Scanned {
        good_end: HEADER_LEN as u64,
        ..Scanned::default()
    };
    let mut value = vec![0u8; 1 << 20];
    loop {
        match next(&mut r, &mut value).map_err(|e| io_err(path, e))? {
            Next::End => return Ok(out),
            Next::Stop(why) => {
                out.damage = Some(format!("at byte {}: {why}", out.good_end));
                return Ok(out);
            }
            Next::Record(head, key) => {
                let Ok(key) = String::from_utf8(key) else {
                    out.damage = Some(format!("at byte {}: a key is not UTF-8", out.good_end));
                    return Ok(out);
                };
                let at = Location {
                    segment: n,
                    offset: out.good_end,
                    key_len: head.key_len,
                    value_len: head.value_len,
                    value_crc: head.value_crc,
                    tag: head.tag,
                };
                out.good_end += at.record_len();
                out.records.push((key, at));
            }
        }
    }
}

enum Next {
    End,
    Record(Head, Vec<u8>),
    Stop(String),
}

/// Reads the next record from `r`, streaming its value through `buf` into its checksum.
fn next(r: &mut impl Read, buf: &mut [u8]) -> io::Result<Next> {
    let mut bytes = vec![0u8; HEAD_LEN];
    let got = read_full(r, &mut bytes)?;
    if got == 0 {
        return Ok(Next::End);
    }
    if got < HEAD_LEN {
        return Ok(Next::Stop("a record head cut short".into()));
    }
    let key_len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    if key_len <= MAX_KEY_LEN {
        bytes.resize(HEAD_LEN + key_len, 0);
        if read_full(r, &mut bytes[HEAD_LEN..])? < key_len {
            return Ok(Next::Stop("a record key cut short".into()));
        }
    }
    let head = match Head::check(&bytes) {
        Checked::Head(head) => head,
        Checked::Short => return Ok(Next::Stop("a record head cut short".into())),
        Checked::Damaged(why) => return Ok(Next::Stop(why.into())),
    };
    let mut crc = crc32fast::Hasher::new();
    let mut left = head.value_len;
    while left > 0 {
        let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        let got = read_full(r, &mut buf[..want])?;
        crc.update(&buf[..got]);
        if got < want {
            return Ok(Next::Stop("a value cut short".into()));
        }
        left -= got as u64;
    }
    if crc.finalize() != head.value_crc {
        return Ok(Next::Stop("value checksum mismatch".into()));
    }
    bytes.drain(..HEAD_LEN);
    Ok(Next::Record(head, bytes))
}

/// Reads until `buf` is full or the input ends; how many bytes it read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The segment files of `dir`, by number.
pub(crate) fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    numbered(dir, PREFIX, SUFFIX)
}
