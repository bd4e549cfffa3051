//! The `Store`'s ranged sessions: a batch's master work done once, its byte ranges moved
//! after, as often as wanted (layer by layer: Mooncake's put and get sessions). Reads:
//! `batch_locate`, then `batch_read_located`. Writes: `batch_reserve`, then
//! `batch_write_reserved`, then `batch_publish` or `batch_revoke`.

use pyo3::prelude::*;
use yuebing_store::{Client, Fragment, Located};

use super::ranges::{batch_over, multi_ranges, same_length, Ranges};
use super::Store;
use crate::errors;
use crate::memory::Access;
use crate::options::{self, Replicas};
use crate::types::{Location, Reservation};
use crate::wait::run_store;

#[pymethods]
impl Store {
    /// Finds each key and takes its read lease, without reading it: one round trip to the
    /// master for the batch. One entry per key: its `Location`, or the `YuebingError` instance
    /// of a failed item (`ObjectNotFound` for a missing key).
    #[pyo3(signature = (keys, *, timeout=None))]
    fn batch_locate(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let each = self.run(py, |c| c.batch_locate(&keys, &opts))?;
        errors::items(py, each, |py, found| {
            Ok(Py::new(py, Location(found))?.into_any())
        })
    }

    /// Reads ranges of located objects into the caller's memory without a copy and without a
    /// round trip to the master: `buffers[i][j]` (a writable buffer, or an int address with
    /// `sizes[i][j]`) receives its length in bytes from `offsets[i][j]` inside
    /// `locations[i]`'s object. One entry per location: the bytes read, or the `YuebingError`
    /// instance of why none was (a range outside the object: `InvalidParams`; past the lease:
    /// `LeaseExpired`, locate it again).
    #[pyo3(signature = (locations, buffers, offsets, sizes=None, *, timeout=None))]
    fn batch_read_located(
        &self,
        py: Python<'_>,
        locations: Vec<Bound<'_, Location>>,
        buffers: Vec<Vec<Bound<'_, PyAny>>>,
        offsets: Vec<Vec<u64>>,
        sizes: Option<Vec<Vec<Option<u64>>>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let client = self.client(py)?;
        let found: Vec<&Located> = locations.iter().map(|l| &l.get().0).collect();
        let keys = found.iter().map(|l| l.key().to_string()).collect();
        let ranges = multi_ranges(self, py, keys, buffers, sizes, Access::Write)?;
        let fragments = fragments(py, &ranges, &offsets)?;
        let items: Vec<(&Located, &[Fragment])> = found
            .into_iter()
            .zip(fragments.iter().map(Vec::as_slice))
            .collect();
        let call =
            |c: &Client, _: &[(String, Vec<(u64, u64)>)]| c.batch_read_located(&items, &opts);
        batch_over(py, client, ranges, call, |py, n: u64| {
            Ok(n.into_pyobject(py)?.into_any().unbind())
        })
    }

    /// Reserves space for each object of `sizes[i]` bytes under `keys[i]` without writing it
    /// (a put, or with `upsert` an upsert; replica settings as `put`'s): one round trip to the
    /// master for the batch. One entry per key: its `Reservation`, or the `YuebingError`
    /// instance of a failed item. Write it with `batch_write_reserved` within `timeout`, then
    /// `batch_publish` or `batch_revoke` it; one left alone is revoked when this client leaves.
    #[pyo3(signature = (keys, sizes, *, timeout=None, replicas=None, preferred=None,
        soft_pin=false, hard_pin=false, upsert=false))]
    #[allow(clippy::too_many_arguments)]
    fn batch_reserve(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        sizes: Vec<u64>,
        timeout: Option<f64>,
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
        upsert: bool,
    ) -> PyResult<Vec<Py<PyAny>>> {
        same_length(py, keys.len(), "sizes", sizes.len())?;
        let replicas = Replicas::of(replicas, preferred, soft_pin, hard_pin);
        let mut opts = self.put_options(py, timeout, replicas)?;
        if upsert {
            opts = opts.with_write(yuebing_store::Write::Upsert);
        }
        let items: Vec<(&str, u64)> = keys.iter().map(String::as_str).zip(sizes).collect();
        let each = self.run(py, |c| c.batch_reserve(&items, &opts))?;
        errors::items(
            py,
            each,
            |py, r| Ok(Py::new(py, Reservation(r))?.into_any()),
        )
    }

    /// Writes ranges of reserved objects from the caller's memory without a copy and without
    /// a round trip to the master: `buffers[i][j]` (any buffer, or an int address with
    /// `sizes[i][j]`) goes to `offsets[i][j]` inside `reservations[i]`'s object, on every
    /// replica. One entry per reservation: the bytes written, or the `YuebingError` instance of
    /// why none was (a range outside the object, or a reservation already published or
    /// revoked: `InvalidParams`).
    #[pyo3(signature = (reservations, buffers, offsets, sizes=None, *, timeout=None))]
    fn batch_write_reserved(
        &self,
        py: Python<'_>,
        reservations: Vec<Bound<'_, Reservation>>,
        buffers: Vec<Vec<Bound<'_, PyAny>>>,
        offsets: Vec<Vec<u64>>,
        sizes: Option<Vec<Vec<Option<u64>>>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let opts = options::call(py, timeout)?;
        let client = self.client(py)?;
        let reserved: Vec<&yuebing_store::Reservation> =
            reservations.iter().map(|r| &r.get().0).collect();
        let keys = reserved.iter().map(|r| r.key().to_string()).collect();
        let ranges = multi_ranges(self, py, keys, buffers, sizes, Access::Read)?;
        let fragments = fragments(py, &ranges, &offsets)?;
        let items: Vec<(&yuebing_store::Reservation, &[Fragment])> = reserved
            .into_iter()
            .zip(fragments.iter().map(Vec::as_slice))
            .collect();
        let call =
            |c: &Client, _: &[(String, Vec<(u64, u64)>)]| c.batch_write_reserved(&items, &opts);
        batch_over(py, client, ranges, call, |py, n: u64| {
            Ok(n.into_pyobject(py)?.into_any().unbind())
        })
    }

    /// Makes each reserved object readable, once the writes under way have ended (later ones
    /// are refused): one round trip to the master. One entry per reservation: `None`, or the
    /// `YuebingError` instance of a failed item (ask again: a repeated publication is `None`).
    #[pyo3(signature = (reservations, *, timeout=None))]
    fn batch_publish(
        &self,
        py: Python<'_>,
        reservations: Vec<Bound<'_, Reservation>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        finish(self, py, reservations, timeout, true)
    }

    /// Drops each reserved object, once the writes under way have ended (later ones are
    /// refused): nothing is stored, and the key may be put again. One round trip to the
    /// master; one entry per reservation: `None`, or the `YuebingError` instance of a failed
    /// item.
    #[pyo3(signature = (reservations, *, timeout=None))]
    fn batch_revoke(
        &self,
        py: Python<'_>,
        reservations: Vec<Bound<'_, Reservation>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        finish(self, py, reservations, timeout, false)
    }
}

/// `batch_publish` (`publish`) or `batch_revoke`.
fn finish(
    store: &Store,
    py: Python<'_>,
    reservations: Vec<Bound<'_, Reservation>>,
    timeout: Option<f64>,
    publish: bool,
) -> PyResult<Vec<Py<PyAny>>> {
    let opts = options::call(py, timeout)?;
    let client = store.client(py)?;
    let reserved: Vec<yuebing_store::Reservation> =
        reservations.iter().map(|r| r.get().0.clone()).collect();
    let each = match publish {
        true => run_store(py, client, |c| c.batch_publish(&reserved, &opts)),
        false => run_store(py, client, |c| c.batch_revoke(&reserved, &opts)),
    }?;
    errors::items(py, each, |py, ()| Ok(py.None()))
}

/// The fragments of each item of a ranged session call: its buffers, each at its offset inside
/// the object (`offsets[i][j]` for `buffers[i][j]`).
fn fragments(
    py: Python<'_>,
    ranges: &Ranges<'_>,
    offsets: &[Vec<u64>],
) -> PyResult<Vec<Vec<Fragment>>> {
    same_length(py, ranges.items.len(), "offset lists", offsets.len())?;
    ranges
        .items
        .iter()
        .zip(offsets)
        .enumerate()
        .map(|(i, ((_, buffers), offsets))| {
            if buffers.len() != offsets.len() {
                let what = format!(
                    "{} buffers but {} offsets for item {i}",
                    buffers.len(),
                    offsets.len()
                );
                return Err(errors::invalid(py, &what));
            }
            Ok(buffers
                .iter()
                .zip(offsets)
                .map(|(&(addr, len), &offset)| Fragment { addr, offset, len })
                .collect())
        })
        .collect()
}
