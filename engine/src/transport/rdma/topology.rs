//! Which NIC is nearest a buffer, from sysfs: the NUMA node of each NIC's PCI device, and for
//! GPU memory, the PCI path the GPU and the NIC share.
//!
//! Read once when the transport starts, from a root that tests point at checked-in fixture
//! trees (`engine/tests/fixtures/sysfs-*`).

use std::path::{Path, PathBuf};

use crate::location::Location;

/// Where one NIC sits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NicPlace {
    /// Its NUMA node (none where sysfs says -1 or nothing).
    pub numa: Option<u32>,
    /// Its PCI device's path under `devices/` (`pci0000:00/0000:00:02.0/0000:17:00.0`).
    pub pci_path: Option<String>,
}

/// Reads where the NIC `name` sits under `sysfs` (normally `/sys`).
pub fn nic_place(sysfs: &Path, name: &str) -> NicPlace {
    let device = sysfs.join("class/infiniband").join(name).join("device");
    NicPlace {
        numa: read_numa(&device.join("numa_node")),
        pci_path: pci_path(sysfs, &device),
    }
}

/// The NUMA node in a `numa_node` file (-1 or unreadable: none).
fn read_numa(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The path of a device link below `{sysfs}/devices/`, resolved.
fn pci_path(sysfs: &Path, link: &Path) -> Option<String> {
    let devices = std::fs::canonicalize(sysfs.join("devices")).ok()?;
    let real = std::fs::canonicalize(link).ok()?;
    let below = real.strip_prefix(devices).ok()?;
    Some(below.to_string_lossy().into_owned())
}

/// The PCI path of the GPU whose PCI bus id is `bus_id` (`0000:17:00.0`).
pub fn gpu_place(sysfs: &Path, bus_id: &str) -> NicPlace {
    let device: PathBuf = sysfs
        .join("bus/pci/devices")
        .join(bus_id.to_ascii_lowercase());
    NicPlace {
        numa: read_numa(&device.join("numa_node")),
        pci_path: pci_path(sysfs, &device),
    }
}

/// How many leading path components two PCI paths share.
fn shared_depth(a: &str, b: &str) -> usize {
    a.split('/')
        .zip(b.split('/'))
        .take_while(|(x, y)| x == y)
        .count()
}

/// The NICs nearest a buffer, in order: for host memory on NUMA node N, the NICs on N (all
/// NICs where none is, or where no NIC's node is known); for GPU memory, the NICs sharing the
/// longest PCI path with the GPU (`gpu`, where known), else its NUMA node's. Never empty when
/// `nics` is not.
pub fn nearest(nics: &[NicPlace], location: Location, gpu: Option<&NicPlace>) -> Vec<usize> {
    let all: Vec<usize> = (0..nics.len()).collect();
    let on_node = |node: Option<u32>| -> Vec<usize> {
        let near: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| node.is_some() && nics[i].numa == node)
            .collect();
        if near.is_empty() {
            all.clone()
        } else {
            near
        }
    };
    match location {
        Location::Cpu { numa } => on_node(Some(numa)),
        Location::Cuda { .. } => {
            let Some(gpu) = gpu else { return all };
            if let Some(g) = &gpu.pci_path {
                let depth = |i: usize| {
                    nics[i]
                        .pci_path
                        .as_deref()
                        .map_or(0, |p| shared_depth(g, p))
                };
                let best = all.iter().map(|&i| depth(i)).max().unwrap_or(0);
                // Sharing only the root complex is no nearer than NUMA.
                if best > 1 {
                    return all.iter().copied().filter(|&i| depth(i) == best).collect();
                }
            }
            on_node(gpu.numa)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs-two-numa")
    }

    fn places() -> Vec<NicPlace> {
        ["mlx5_0", "mlx5_1", "mlx5_2"]
            .iter()
            .map(|n| nic_place(&fixture(), n))
            .collect()
    }

    #[test]
    fn nics_are_placed_from_sysfs() {
        let p = places();
        assert_eq!(p[0].numa, Some(0));
        assert_eq!(
            p[0].pci_path.as_deref(),
            Some("pci0000:00/0000:00:01.0/0000:17:00.0")
        );
        assert_eq!(p[1].numa, Some(1));
        // numa_node -1: unknown.
        assert_eq!(p[2].numa, None);
        assert_eq!(nic_place(&fixture(), "mlx5_9"), NicPlace::default());
    }

    #[test]
    fn host_memory_goes_to_the_nics_on_its_node() {
        let p = places();
        assert_eq!(nearest(&p, Location::Cpu { numa: 0 }, None), [0]);
        assert_eq!(nearest(&p, Location::Cpu { numa: 1 }, None), [1]);
        // No NIC on node 5: every NIC.
        assert_eq!(nearest(&p, Location::Cpu { numa: 5 }, None), [0, 1, 2]);
        // No sysfs at all: every NIC.
        let unknown = vec![NicPlace::default(); 2];
        assert_eq!(nearest(&unknown, Location::Cpu { numa: 0 }, None), [0, 1]);
    }

    #[test]
    fn gpu_memory_goes_to_the_nic_behind_the_same_pci_switch() {
        let p = places();
        let gpu = gpu_place(&fixture(), "0000:B2:00.0");
        assert_eq!(
            gpu.pci_path.as_deref(),
            Some("pci0000:80/0000:80:01.0/0000:b2:00.0")
        );
        // mlx5_1 shares the switch 0000:80:01.0; mlx5_2 only the root complex.
        assert_eq!(nearest(&p, Location::Cuda { device: 0 }, Some(&gpu)), [1]);
        // A GPU whose PCI path is unknown: its NUMA node decides.
        let numa_only = NicPlace {
            numa: Some(0),
            pci_path: None,
        };
        assert_eq!(
            nearest(&p, Location::Cuda { device: 0 }, Some(&numa_only)),
            [0]
        );
        assert_eq!(nearest(&p, Location::Cuda { device: 0 }, None), [0, 1, 2]);
    }
}
