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
    /// Refuses locations this build or machine cannot register: GPU memory needs the `cuda`
    /// feature ([`Error::GpuNotBuilt`] without it), a CUDA driver ([`Error::NoCudaDriver`])
    /// and a GPU of that ordinal.
    pub fn check_supported(self) -> Result<(), Error> {
        match self {
            Location::Cpu { .. } => Ok(()),
            #[cfg(feature = "cuda")]
            Location::Cuda { device } => crate::gpu::check(device),
            #[cfg(not(feature = "cuda"))]
            Location::Cuda { .. } => Err(Error::GpuNotBuilt {
                location: self.to_string(),
            }),
        }
    }

    /// The GPU this memory is on, if any.
    pub fn gpu(self) -> Option<u32> {
        match self {
            Location::Cpu { .. } => None,
            Location::Cuda { device } => Some(device),
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
    #[cfg(not(feature = "cuda"))]
    fn gpu_needs_the_feature() {
        let gpu = Location::Cuda { device: 0 };
        assert_eq!(gpu.check_supported().unwrap_err().code(), -3507);
        assert!(Location::default().check_supported().is_ok());
    }

    #[test]
    #[cfg(feature = "cuda")]
    fn gpu_needs_a_driver_and_the_gpu() {
        let past = Location::Cuda { device: 4096 };
        match crate::gpu::count() {
            // No driver (CI): NoCudaDriver, whatever the ordinal.
            Err(_) => assert_eq!(past.check_supported().unwrap_err().code(), -3513),
            Ok(_) => assert_eq!(past.check_supported().unwrap_err().code(), -3001),
        }
        assert!(Location::default().check_supported().is_ok());
    }
}
