//! The `Store`'s store space while it runs: ranges of this process's memory mounted for the
//! cluster's objects, or ranges of a file (Mooncake's `allocate_and_mount_segment` and
//! `mount_segment`), and unmounted again.

use std::time::Duration;

use pyo3::prelude::*;
use yuebing_store::SpaceId;

use super::Store;
use crate::options;

#[pymethods]
impl Store {
    /// Allocates `size` bytes (an int or text such as "64MiB") of this process's memory and
    /// mounts it as more store space: new objects may be placed there once this returns.
    /// Returns its id (for `unmount_space`); the space given at `Store(store_size=)` is id 0.
    #[pyo3(signature = (size, *, timeout=None))]
    fn mount_space(
        &self,
        py: Python<'_>,
        size: &Bound<'_, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        let size = options::size(size, "size")?;
        Ok(self.run(py, |c| c.mount_space(size, &opts))?.0)
    }

    /// Maps `size` bytes (an int or text such as "64MiB") of the file at `path` from `offset`
    /// (a multiple of the page size; the range must lie inside the file) and mounts them as
    /// more store space: objects placed there are written into the file. Peers reach it over
    /// tcp. If the file is truncated meanwhile, transfers touching the lost pages fail with an
    /// error. Returns its id (for `unmount_space`, which unmaps the file).
    #[pyo3(signature = (path, size, offset=0, *, timeout=None))]
    fn mount_file(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        size: &Bound<'_, PyAny>,
        offset: u64,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let opts = options::call(py, timeout)?;
        let size = options::size(size, "size")?;
        Ok(self.run(py, |c| c.mount_file(path, offset, size, &opts))?.0)
    }

    /// Unmounts a range of store space: no new object goes there; its objects stay readable
    /// for `grace` seconds (at most the master's unmount grace; 0: they are dropped at once),
    /// then the memory is freed. An id not mounted raises `InvalidParams`.
    #[pyo3(signature = (space, grace=0.0, *, timeout=None))]
    fn unmount_space(
        &self,
        py: Python<'_>,
        space: u64,
        grace: f64,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        let opts = options::call(py, timeout)?;
        let grace = match grace {
            0.0 => Duration::ZERO,
            _ => options::duration(py, grace, "grace")?,
        };
        self.run(py, |c| c.unmount_space(SpaceId(space), grace, &opts))
    }

    /// The ranges of store space mounted now: `(id, address, size)` each.
    fn spaces(&self, py: Python<'_>) -> PyResult<Vec<(u64, u64, u64)>> {
        let spaces = self.client(py)?.client().spaces();
        Ok(spaces.into_iter().map(|(id, a, n)| (id.0, a, n)).collect())
    }
}
