//! Settings from Python keyword arguments: per-call options (a timeout, replica settings),
//! durations in seconds and sizes in bytes or as text ("64MiB").

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};
use yuebing_rpc::Size;
use yuebing_store::master::PutConfig;
use yuebing_store::Options;

use crate::errors;

/// `secs` seconds (`what` names it in errors): positive (`InvalidArgument` otherwise); `inf`
/// is no limit to speak of.
pub(crate) fn duration(py: Python<'_>, secs: f64, what: &str) -> PyResult<Duration> {
    if secs.is_nan() || secs <= 0.0 {
        return Err(errors::invalid(
            py,
            &format!("{what} must be a positive number of seconds, not {secs}"),
        ));
    }
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

/// Options of a call that takes only a timeout (seconds; `None`: the store's default).
pub(crate) fn call(py: Python<'_>, timeout: Option<f64>) -> PyResult<Options> {
    Ok(Options {
        deadline: timeout.map(|t| duration(py, t, "timeout")).transpose()?,
        ..Options::default()
    })
}

/// Options of a read: a timeout, and `uncached` (ask the master for the object's location
/// even when this store keeps it: see `Store(lease_cache=...)`).
pub(crate) fn read(py: Python<'_>, timeout: Option<f64>, uncached: bool) -> PyResult<Options> {
    Ok(Options {
        uncached,
        ..call(py, timeout)?
    })
}

/// The replica settings of a put, from its keyword arguments.
#[derive(Debug, Clone, Default)]
pub(crate) struct Replicas {
    /// Replicas wanted (`None`: the store's default).
    pub(crate) replicas: Option<u32>,
    /// Nodes (segment names) to use first.
    pub(crate) preferred: Option<Vec<String>>,
    /// Evicted after unpinned objects.
    pub(crate) soft_pin: bool,
    /// Never evicted.
    pub(crate) hard_pin: bool,
}

impl Replicas {
    /// The settings of a put's keyword arguments.
    pub(crate) fn of(
        replicas: Option<u32>,
        preferred: Option<Vec<String>>,
        soft_pin: bool,
        hard_pin: bool,
    ) -> Replicas {
        Replicas {
            replicas,
            preferred,
            soft_pin,
            hard_pin,
        }
    }

    /// Whether any setting differs from the store's default.
    fn any(&self) -> bool {
        self.replicas.is_some() || self.preferred.is_some() || self.soft_pin || self.hard_pin
    }
}

/// Options of a put: a timeout and replica settings (the store's defaults where not given).
/// `replicas=0` and an empty name in `preferred` are `InvalidArgument`.
pub(crate) fn put(
    py: Python<'_>,
    timeout: Option<f64>,
    r: Replicas,
    default: &PutConfig,
) -> PyResult<Options> {
    let mut opts = call(py, timeout)?;
    if r.any() {
        if r.replicas == Some(0) {
            return Err(errors::invalid(py, "replicas must be at least 1"));
        }
        if let Some(i) = r
            .preferred
            .iter()
            .flatten()
            .position(|n| n.trim().is_empty())
        {
            return Err(errors::invalid(
                py,
                &format!("preferred[{i}] is empty: give segment names (host:port)"),
            ));
        }
        opts.put = Some(PutConfig {
            replica_num: r.replicas.unwrap_or(default.replica_num),
            preferred: r.preferred.unwrap_or_else(|| default.preferred.clone()),
            soft_pin: r.soft_pin,
            hard_pin: r.hard_pin,
        });
    }
    Ok(opts)
}

/// A size in bytes: an `int`, or text such as `"4096"`, `"64MiB"`, `"2G"`, `"512k"`, parsed as
/// everywhere in yuebing ([`yuebing_rpc::Size`]: binary units B, K, M, G, T, each also as `Ki`,
/// `KB`, `KiB`, in any case). Text that is no size is `InvalidArgument`, another type
/// `TypeError`.
pub(crate) fn size(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if let Ok(text) = obj.cast::<PyString>() {
        return text
            .to_str()?
            .parse::<Size>()
            .map(Size::bytes)
            .map_err(|e| errors::invalid(obj.py(), &format!("{what}: {e}")));
    }
    let message = format!("{what} must be a non-negative int or a size such as \"64MiB\"");
    obj.extract::<u64>()
        .map_err(|_| match obj.is_instance_of::<PyInt>() {
            true => errors::invalid(obj.py(), &message),
            false => PyTypeError::new_err(message),
        })
}
