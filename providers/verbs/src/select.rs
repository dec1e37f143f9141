//! Which device, port and address a verbs domain opens, or why verbs is
//! unavailable. One function, [`choose`] (the probe of [`select`]'s
//! candidates, then [`select`] over them), serves both the facade's report
//! (`xfer::info`, `xfer-info`) and [`crate::VerbsDomain::with_attr`], with the
//! same settings, so the report cannot call verbs usable where opening it
//! fails for a reason it could see.

use std::fmt;
use std::net::Ipv4Addr;

use crate::device::{probe_ports, DeviceInfo, GidEntry, Probe};
use crate::VerbsAttr;

/// Why verbs cannot be used on this host, from the most basic lack up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lack {
    /// rdma-core (`libibverbs.so.1`, `librdmacm.so.1`) is not installed or
    /// cannot be loaded.
    RdmaCore,
    /// rdma-core is there but lists no usable device (or not the one asked for).
    Device,
    /// A device is there but the port asked for is missing or not active.
    Port,
    /// The port is active but has no IPv4 address to listen on.
    Address,
}

impl fmt::Display for Lack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lack::RdmaCore => "no rdma-core",
            Lack::Device => "no verbs device",
            Lack::Port => "port not active",
            Lack::Address => "no address",
        })
    }
}

/// Verbs is unavailable: the furthest any device got ([`Lack`]) and what
/// each device lacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The class of reason; with several devices, the one that got furthest.
    pub lack: Lack,
    /// The details, one per device or problem, `; `-separated.
    pub detail: String,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.lack, self.detail)
    }
}

/// The device, port and address a verbs domain uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Device name.
    pub device: String,
    /// Port number (1-based).
    pub port: u8,
    /// `Ethernet` (RoCE), `InfiniBand` or `unspecified`.
    pub link_layer: &'static str,
    /// Active MTU in bytes.
    pub mtu: u32,
    /// The IPv4 address endpoints listen on.
    pub ip: Ipv4Addr,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} port {} ({}, MTU {}), listening on {}",
            self.device, self.port, self.link_layer, self.mtu, self.ip
        )
    }
}

/// The IPv4 address endpoints listen on, given the port's GIDs: configured
/// (`XFER_VERBS_ADDR`), else that of the RoCE v2 IPv4-mapped GID, else of any
/// IPv4-mapped GID.
pub fn listen_ip(gids: &[GidEntry], attr: &VerbsAttr) -> Option<Ipv4Addr> {
    attr.addr
        .or_else(|| gids.iter().filter(|g| g.is_roce_v2()).find_map(GidEntry::ipv4))
        .or_else(|| gids.iter().find_map(GidEntry::ipv4))
}

/// The device, port and address a verbs domain with `attr` opens, or why
/// there is none: [`select`] over the devices found now ([`probe_ports`] of
/// `attr.device`, else of every device). What `xfer::info` reports and what
/// [`crate::VerbsDomain::with_params`] opens.
pub fn choose(attr: &VerbsAttr) -> Result<Selection, Unavailable> {
    select(&probe_ports(attr.device.as_deref()), attr)
}

/// The first device (the one `attr.device` names, if set) whose port
/// `attr.port` is active and has an address to listen on.
pub fn select(probe: &Probe, attr: &VerbsAttr) -> Result<Selection, Unavailable> {
    if !probe.loaded {
        return Err(Unavailable {
            lack: Lack::RdmaCore,
            detail: probe.reason.clone().unwrap_or_else(|| "rdma-core not loaded".into()),
        });
    }
    let candidates: Vec<&DeviceInfo> = match &attr.device {
        Some(name) => probe.devices.iter().filter(|d| &d.name == name).collect(),
        None => probe.devices.iter().collect(),
    };
    if candidates.is_empty() {
        let found: Vec<&str> = probe.devices.iter().map(|d| d.name.as_str()).collect();
        let detail = match (&attr.device, &probe.reason) {
            (Some(name), Some(reason)) => {
                format!("verbs.device (XFER_VERBS_DEVICE)={name}: not found or not usable ({reason})")
            }
            (Some(name), None) => format!(
                "verbs.device (XFER_VERBS_DEVICE)={name}: no such device (found: {})",
                found.join(", ")
            ),
            (None, Some(reason)) => reason.clone(),
            (None, None) => "no verbs devices".into(),
        };
        return Err(Unavailable {
            lack: Lack::Device,
            detail,
        });
    }
    let mut lack = Lack::Device;
    let mut why = Vec::new();
    for dev in candidates {
        let Some(port) = dev.ports.iter().find(|p| p.attr.port == attr.port) else {
            lack = lack.max(Lack::Port);
            why.push(format!("{}: no port {}", dev.name, attr.port));
            continue;
        };
        if !port.attr.active {
            lack = lack.max(Lack::Port);
            why.push(format!("{}: port {} not active", dev.name, attr.port));
            continue;
        }
        match listen_ip(&port.gids, attr) {
            Some(ip) => {
                return Ok(Selection {
                    device: dev.name.clone(),
                    port: attr.port,
                    link_layer: port.attr.link_layer,
                    mtu: port.attr.active_mtu,
                    ip,
                })
            }
            None => {
                lack = Lack::Address;
                why.push(format!(
                    "{} port {} has no IPv4 GID; set verbs.addr (XFER_VERBS_ADDR) to its IP (IPoIB) address",
                    dev.name, attr.port
                ))
            }
        }
    }
    if let Some(reason) = &probe.reason {
        why.push(reason.clone());
    }
    Err(Unavailable {
        lack,
        detail: why.join("; "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::PortInfo;
    use crate::{DeviceAttr, PortAttr};

    fn gid(index: u8, ipv4: Option<[u8; 4]>, kind: &str) -> GidEntry {
        let mut gid = [0u8; 16];
        match ipv4 {
            Some(ip) => {
                gid[10..12].fill(0xff);
                gid[12..].copy_from_slice(&ip);
            }
            None => gid[..2].copy_from_slice(&[0xfe, 0x80]),
        }
        GidEntry {
            index,
            gid,
            kind: kind.into(),
        }
    }

    fn device(name: &str, active: bool, gids: Vec<GidEntry>) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            attr: DeviceAttr {
                phys_port_cnt: 1,
                max_qp: 64,
                max_qp_wr: 1024,
                max_sge: 4,
                max_cq: 64,
                max_cqe: 4096,
                max_mr_size: 1 << 40,
                max_srq: 8,
                max_srq_wr: 1024,
                max_srq_sge: 4,
                max_qp_rd_atom: 16,
                max_qp_init_rd_atom: 16,
                atomic_cap: 1,
            },
            max_inline: 256,
            ports: vec![PortInfo {
                attr: PortAttr {
                    port: 1,
                    active,
                    state: if active { 4 } else { 1 },
                    link_layer: "Ethernet",
                    active_mtu: 1024,
                    max_mtu: 4096,
                    gid_tbl_len: 16,
                    lid: 0,
                    max_msg_sz: 1 << 31,
                },
                gids,
            }],
        }
    }

    fn probe(devices: Vec<DeviceInfo>, reason: Option<&str>) -> Probe {
        Probe {
            loaded: true,
            devices,
            reason: reason.map(Into::into),
        }
    }

    #[test]
    fn each_lack_has_its_own_reason() {
        let none = Probe {
            loaded: false,
            devices: Vec::new(),
            reason: Some("libibverbs.so.1: cannot open shared object file".into()),
        };
        let e = select(&none, &VerbsAttr::default()).unwrap_err();
        assert_eq!(e.lack, Lack::RdmaCore);
        assert_eq!(
            e.to_string(),
            "no rdma-core: libibverbs.so.1: cannot open shared object file"
        );

        let e = select(&probe(Vec::new(), Some("no verbs devices")), &VerbsAttr::default()).unwrap_err();
        assert_eq!(
            (e.lack, e.to_string().as_str()),
            (Lack::Device, "no verbs device: no verbs devices")
        );
        let e = select(
            &probe(Vec::new(), Some("ibv_get_device_list failed: ENOSYS")),
            &VerbsAttr::default(),
        )
        .unwrap_err();
        assert_eq!(e.lack, Lack::Device);
        assert_eq!(e.detail, "ibv_get_device_list failed: ENOSYS");

        let down = probe(
            vec![device("rxe0", false, vec![gid(1, Some([10, 0, 0, 1]), "RoCE v2")])],
            None,
        );
        let e = select(&down, &VerbsAttr::default()).unwrap_err();
        assert_eq!(e.to_string(), "port not active: rxe0: port 1 not active");

        let no_ip = probe(vec![device("rxe1", true, vec![gid(0, None, "IB/RoCE v1")])], None);
        let e = select(&no_ip, &VerbsAttr::default()).unwrap_err();
        assert_eq!(e.lack, Lack::Address);
        assert!(e.detail.contains("XFER_VERBS_ADDR"), "{e}");
    }

    #[test]
    fn first_active_device_with_an_address() {
        let probe = probe(
            vec![
                device("rxe0", false, vec![gid(1, Some([10, 0, 0, 1]), "RoCE v2")]),
                device("rxe1", true, vec![gid(0, None, "IB/RoCE v1")]),
                device(
                    "rxe2",
                    true,
                    vec![
                        gid(0, Some([10, 0, 0, 9]), "IB/RoCE v1"),
                        gid(1, Some([10, 0, 0, 3]), "RoCE v2"),
                    ],
                ),
            ],
            None,
        );
        let sel = |attr: &VerbsAttr| select(&probe, attr);
        let s = sel(&VerbsAttr::default()).expect("rxe2 is usable");
        assert_eq!(s.to_string(), "rxe2 port 1 (Ethernet, MTU 1024), listening on 10.0.0.3");

        let e = sel(&VerbsAttr {
            device: Some("rxe0".into()),
            ..VerbsAttr::default()
        })
        .unwrap_err();
        assert_eq!((e.lack, e.detail.as_str()), (Lack::Port, "rxe0: port 1 not active"));

        let e = sel(&VerbsAttr {
            device: Some("rxe1".into()),
            ..VerbsAttr::default()
        })
        .unwrap_err();
        assert_eq!(e.lack, Lack::Address);
        let s = sel(&VerbsAttr {
            device: Some("rxe1".into()),
            addr: Some([192, 168, 1, 1].into()),
            ..VerbsAttr::default()
        })
        .expect("an address configured for a port without an IPv4 GID");
        assert_eq!(s.ip, Ipv4Addr::new(192, 168, 1, 1));

        let e = sel(&VerbsAttr {
            device: Some("mlx5_0".into()),
            ..VerbsAttr::default()
        })
        .unwrap_err();
        assert_eq!(e.lack, Lack::Device);
        assert_eq!(
            e.detail,
            "verbs.device (XFER_VERBS_DEVICE)=mlx5_0: no such device (found: rxe0, rxe1, rxe2)"
        );

        let e = sel(&VerbsAttr {
            port: 2,
            ..VerbsAttr::default()
        })
        .unwrap_err();
        assert_eq!(e.lack, Lack::Port);
        assert_eq!(e.detail, "rxe0: no port 2; rxe1: no port 2; rxe2: no port 2");
    }
}
