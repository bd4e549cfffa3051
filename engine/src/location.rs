//! Where registered memory lives: host memory on a NUMA node, or a GPU.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// A memory location tag, written `cpu:N` or `cuda:N` (`cpu` alone means `cpu:0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Location {
    /// Host memory on NUMA node `numa`.
    Cpu {
        /// NUMA node.
        numa: u32,
    },
    /// Memory of GPU `device`.
    Cuda {
        /// Device ordinal.
        device: u32,
    },
}

impl Default for Location {
    fn default() -> Self {
        Location::Cpu { numa: 0 }
    }
}

impl Location {
    /// Refuses locations this build cannot register. GPU memory needs the `cuda` feature,
    /// which arrives with GPU support (cudarc); until then every `cuda:N` is refused.
    pub fn check_supported(self) -> Result<(), Error> {
        match self {
            Location::Cpu { .. } => Ok(()),
            Location::Cuda { .. } => Err(Error::GpuNotBuilt {
                location: self.to_string(),
            }),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Cpu { numa } => write!(f, "cpu:{numa}"),
            Location::Cuda { device } => write!(f, "cuda:{device}"),
        }
    }
}

impl FromStr for Location {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let (kind, index) = s.split_once(':').unwrap_or((s, "0"));
        let index: u32 = index
            .parse()
            .map_err(|_| Error::invalid(format!("location {s:?}: index is not a number")))?;
        match kind {
            "cpu" => Ok(Location::Cpu { numa: index }),
            "cuda" => Ok(Location::Cuda { device: index }),
            _ => Err(Error::invalid(format!(
                "location {s:?}: expected cpu:N or cuda:N"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        assert_eq!(
            "cpu".parse::<Location>().unwrap(),
            Location::Cpu { numa: 0 }
        );
        assert_eq!("cuda:1".parse::<Location>().unwrap().to_string(), "cuda:1");
        assert!("tpu:0".parse::<Location>().is_err());
        assert!("cpu:x".parse::<Location>().is_err());
    }

    #[test]
    fn gpu_needs_the_feature() {
        let gpu = Location::Cuda { device: 0 };
        assert_eq!(gpu.check_supported().unwrap_err().code(), -3507);
        assert!(Location::default().check_supported().is_ok());
    }
}
