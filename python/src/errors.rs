//! yuebing's errors as Python exceptions. The classes live in `yuebing/errors.py`: one per
//! named code, built from [`error_codes`] (the bridge's one table of codes and names), under the
//! base `YuebingError`, which carries `.code` and `.name`. Here an error becomes an instance of
//! its code's class.
//!
//! Making an exception runs Python code (`yuebing.errors._exception`), which may hand the GIL
//! to another thread: never make one while holding a lock that a thread holding the GIL may
//! wait for. Keep the Rust error until the lock is released, then convert it.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// `yuebing.errors._exception(code, name, message)`, the factory of exception instances.
static FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Every named error code of yuebing with its name, `[(-704, "ObjectNotFound"), …]`: the table
/// `yuebing.errors` builds its exception classes from.
#[pyfunction]
pub(crate) fn error_codes() -> Vec<(i32, &'static str)> {
    yuebing_bridge::error::code_names().collect()
}

/// The exception (not raised) for code `code` with `message`.
fn exception(py: Python<'_>, code: i32, message: &str) -> PyErr {
    let name = yuebing_bridge::error::code_name(code);
    let made = FACTORY
        .get_or_try_init(py, || {
            py.import("yuebing.errors")?
                .getattr("_exception")
                .map(Bound::unbind)
        })
        .and_then(|factory| factory.bind(py).call1((code, name, message)));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        // Only when the package is broken (the module imported without `yuebing.errors`).
        Err(e) => PyRuntimeError::new_err(format!(
            "{name} ({code}): {message} [yuebing.errors unavailable: {e}]"
        )),
    }
}

/// A bridged call's error as its Python exception.
pub(crate) fn to_py(py: Python<'_>, e: &yuebing_bridge::Error) -> PyErr {
    exception(py, e.code(), &e.to_string())
}

/// One failed item of a batch, as the exception instance the batch's list holds.
pub(crate) fn item(py: Python<'_>, e: yuebing_store::Error) -> Py<PyAny> {
    to_py(py, &yuebing_bridge::Error::Store(e))
        .into_value(py)
        .into_any()
}

/// A batch's items: each value made by `ok`, or the exception instance of its error.
pub(crate) fn items<T>(
    py: Python<'_>,
    each: Vec<yuebing_store::Result<T>>,
    ok: impl Fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
) -> PyResult<Vec<Py<PyAny>>> {
    each.into_iter()
        .map(|r| match r {
            Ok(v) => ok(py, v),
            Err(e) => Ok(item(py, e)),
        })
        .collect()
}

/// `InvalidArgument` (−4010, also a `ValueError`): an argument of a Python call is out of its
/// domain; `message` names the argument. Raised where the argument enters, before anything is
/// changed (the binding's own decoding; errors of the layers below keep their own classes).
pub(crate) fn invalid(py: Python<'_>, message: &str) -> PyErr {
    exception(
        py,
        yuebing_bridge::ffi::error::YUEBING_ERR_INVALID_ARGUMENT,
        message,
    )
}

/// An engine error (a synchronous engine call) as its Python exception.
pub(crate) fn engine(py: Python<'_>, e: yuebing_engine::Error) -> PyErr {
    to_py(py, &yuebing_bridge::Error::Engine(e))
}
