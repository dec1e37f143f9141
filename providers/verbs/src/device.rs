//! Device discovery: list devices, open a context, query device and port limits,
//! read the GID table, and [`probe`] everything for `xfer-info` and provider
//! selection.

use std::ffi::CStr;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::rdma_core::{
    ibv_close_device, ibv_free_device_list, ibv_get_device_list, ibv_get_device_name, ibv_open_device,
    ibv_query_device, ibv_query_gid, ibv_query_port,
};
use rdma_sys::{ibv_context, ibv_device_attr, ibv_gid, ibv_port_attr, ibv_port_state};
use xfer_core::{Error, Result};

use crate::cq::Cq;
use crate::pd::Pd;
use crate::qp::RcQp;
use crate::sys::{check, last_os_error, mtu_bytes};

/// Link layer value of an Ethernet (RoCE) port (`IBV_LINK_LAYER_ETHERNET`).
const LINK_LAYER_ETHERNET: u8 = 2;
/// Link layer value of an InfiniBand port (`IBV_LINK_LAYER_INFINIBAND`).
const LINK_LAYER_INFINIBAND: u8 = 1;

/// Names of the verbs devices present. `Err` carries the reason there are none
/// readable (on a machine without RDMA support `ibv_get_device_list` fails with
/// ENOSYS).
pub fn device_names() -> std::result::Result<Vec<String>, String> {
    crate::rdma_core::load()?;
    let mut n: libc::c_int = 0;
    // SAFETY: n is a valid out-pointer; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = std::io::Error::last_os_error();
        return Err(format!("ibv_get_device_list failed: {e}"));
    }
    let mut names = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: list holds n valid device pointers; the names are NUL-terminated
        // strings owned by the device, copied before the list is freed.
        unsafe {
            let dev = *list.add(i);
            let name = ibv_get_device_name(dev);
            if !name.is_null() {
                names.push(CStr::from_ptr(name).to_string_lossy().into_owned());
            }
        }
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { ibv_free_device_list(list) };
    Ok(names)
}

/// An open device context (`ibv_context`), closed on drop.
pub struct Context {
    ctx: *mut ibv_context,
    name: String,
}

// SAFETY: libibverbs contexts are thread-safe; this crate only passes the
// pointer to libibverbs calls.
unsafe impl Send for Context {}
// SAFETY: as above; no method mutates through &self outside libibverbs.
unsafe impl Sync for Context {}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("name", &self.name).finish()
    }
}

impl Context {
    /// Opens the device called `name`.
    pub fn open(name: &str) -> Result<Arc<Context>> {
        crate::rdma_core::load().map_err(Error::NoProvider)?;
        let mut n: libc::c_int = 0;
        // SAFETY: n is a valid out-pointer; the list is freed before returning.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(Error::NoProvider(format!(
                "no verbs devices: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut ctx = std::ptr::null_mut();
        let mut err = None;
        for i in 0..n.max(0) as usize {
            // SAFETY: list holds n valid devices; the name is a NUL-terminated string.
            let (dev, dev_name) = unsafe {
                let dev = *list.add(i);
                (
                    dev,
                    CStr::from_ptr(ibv_get_device_name(dev)).to_string_lossy().into_owned(),
                )
            };
            if dev_name == name {
                // SAFETY: dev is valid until the list is freed; the opened context
                // stays valid after ibv_free_device_list.
                ctx = unsafe { ibv_open_device(dev) };
                if ctx.is_null() {
                    err = Some(last_os_error());
                }
                break;
            }
        }
        // SAFETY: freed once; an opened context does not depend on the list.
        unsafe { ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(err.unwrap_or_else(|| Error::NoProvider(format!("no verbs device named {name}"))));
        }
        Ok(Arc::new(Context {
            ctx,
            name: name.to_owned(),
        }))
    }

    /// The raw `ibv_context`.
    pub fn as_ptr(&self) -> *mut ibv_context {
        self.ctx
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Device limits (`ibv_query_device`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: ibv_device_attr is plain data; all-zero is a valid value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; a is a valid out-pointer.
        check(unsafe { ibv_query_device(self.ctx, &mut a) })?;
        Ok(DeviceAttr {
            phys_port_cnt: a.phys_port_cnt,
            max_qp: a.max_qp.max(0) as u32,
            max_qp_wr: a.max_qp_wr.max(0) as u32,
            max_sge: a.max_sge.max(0) as u32,
            max_cq: a.max_cq.max(0) as u32,
            max_cqe: a.max_cqe.max(0) as u32,
            max_mr_size: a.max_mr_size,
            max_srq: a.max_srq.max(0) as u32,
            max_srq_wr: a.max_srq_wr.max(0) as u32,
            max_srq_sge: a.max_srq_sge.max(0) as u32,
            max_qp_rd_atom: a.max_qp_rd_atom.max(0) as u32,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.max(0) as u32,
            atomic_cap: a.atomic_cap,
        })
    }

    /// Attributes of port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: ibv_port_attr is plain data; all-zero is a valid value.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is open; a is a valid out-pointer. (`ibv_query_port` is a
        // macro in verbs.h; rdma-sys exposes the inline function under this name.)
        check(unsafe { ibv_query_port(self.ctx, port, &mut a) })?;
        Ok(PortAttr {
            port,
            active: a.state == ibv_port_state::IBV_PORT_ACTIVE,
            state: a.state,
            link_layer: match a.link_layer {
                LINK_LAYER_ETHERNET => "Ethernet",
                LINK_LAYER_INFINIBAND => "InfiniBand",
                _ => "unspecified",
            },
            active_mtu: mtu_bytes(a.active_mtu),
            max_mtu: mtu_bytes(a.max_mtu),
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
            lid: a.lid,
            max_msg_sz: a.max_msg_sz,
        })
    }

    /// The non-zero entries of port `port`'s GID table. The GID type comes from
    /// sysfs (`/sys/class/infiniband/DEV/ports/N/gid_attrs/types/I`), empty when
    /// the kernel does not say.
    pub fn gids(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len;
        let mut out = Vec::new();
        for index in 0..len.min(256) {
            // SAFETY: ibv_gid is a plain 16-byte union; zero is valid.
            let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: ctx is open, index < gid_tbl_len, gid is a valid out-pointer.
            if unsafe { ibv_query_gid(self.ctx, port, index as libc::c_int, &mut gid) } != 0 {
                continue;
            }
            // SAFETY: every bit pattern is a valid [u8; 16].
            let raw = unsafe { gid.raw };
            if raw == [0; 16] {
                continue;
            }
            let path = format!(
                "/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{index}",
                self.name
            );
            let kind = std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .unwrap_or_default();
            out.push(GidEntry {
                index: index as u8,
                gid: raw,
                kind,
            });
        }
        Ok(out)
    }

    /// The largest `max_inline_data` an RC QP gets on this device, found by
    /// creating probe QPs (the device attributes do not report it). 0 if the
    /// device supports no inline data.
    pub fn probe_max_inline(self: &Arc<Self>) -> Result<u32> {
        let pd = Pd::new(self)?;
        let cq = Cq::new(self, 16, false)?;
        for want in [1024u32, 512, 256, 220, 128, 64, 32, 16, 0] {
            if let Ok(qp) = RcQp::create_probe(&pd, &cq, want) {
                return Ok(qp.max_inline());
            }
        }
        Ok(0)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: ctx was opened by ibv_open_device; every object created on it
        // holds an Arc<Context>, so none is left.
        let rc = unsafe { ibv_close_device(self.ctx) };
        if rc != 0 {
            tracing::warn!(rc, device = %self.name, "ibv_close_device failed");
        }
    }
}

/// Device limits from `ibv_query_device`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // field names are libibverbs' own
pub struct DeviceAttr {
    pub phys_port_cnt: u8,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr_size: u64,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    /// `ibv_atomic_cap`: 0 `IBV_ATOMIC_NONE` (no remote atomics), 1
    /// `IBV_ATOMIC_HCA` (atomic among the device's own atomics only), 2
    /// `IBV_ATOMIC_GLOB` (also with the host CPU's).
    pub atomic_cap: u32,
}

impl DeviceAttr {
    /// Whether the device does remote atomics (`atomic_cap` is not
    /// `IBV_ATOMIC_NONE`).
    pub fn has_atomics(&self) -> bool {
        self.atomic_cap != rdma_sys::ibv_atomic_cap::IBV_ATOMIC_NONE
    }

    /// `atomic_cap` by its verbs name: `none`, `hca`, `glob` (`unknown`
    /// for a value verbs does not define).
    pub fn atomic_cap_name(&self) -> &'static str {
        use rdma_sys::ibv_atomic_cap::*;
        match self.atomic_cap {
            IBV_ATOMIC_NONE => "none",
            IBV_ATOMIC_HCA => "hca",
            IBV_ATOMIC_GLOB => "glob",
            _ => "unknown",
        }
    }
}

/// Port attributes from `ibv_query_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// Port number (1-based).
    pub port: u8,
    /// The port state is `IBV_PORT_ACTIVE`.
    pub active: bool,
    /// Raw `ibv_port_state`.
    pub state: u32,
    /// `Ethernet` (RoCE), `InfiniBand` or `unspecified` (iWARP, older drivers).
    pub link_layer: &'static str,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Largest MTU in bytes.
    pub max_mtu: u32,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the table.
    pub index: u8,
    /// The GID.
    pub gid: [u8; 16],
    /// The kernel's type string: `RoCE v2`, `IB/RoCE v1`, or empty.
    pub kind: String,
}

impl GidEntry {
    /// The IPv4 address if this GID is IPv4-mapped (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        let g = &self.gid;
        (g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff).then(|| Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }

    /// True for a RoCE v2 GID.
    pub fn is_roce_v2(&self) -> bool {
        self.kind.eq_ignore_ascii_case("RoCE v2")
    }
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.gid.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        if !self.kind.is_empty() {
            write!(f, " ({})", self.kind)?;
        }
        Ok(())
    }
}

/// What [`probe`] found about one port.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Port attributes.
    pub attr: PortAttr,
    /// Non-zero GIDs.
    pub gids: Vec<GidEntry>,
}

impl PortInfo {
    /// Index of the RoCE v2 IPv4-mapped GID (what rdma_cm uses for an IPv4
    /// address on RoCE), if any.
    pub fn roce_v2_ipv4_gid(&self) -> Option<&GidEntry> {
        self.gids.iter().find(|g| g.is_roce_v2() && g.ipv4().is_some())
    }
}

/// What [`probe`] found about one device.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// Device limits.
    pub attr: DeviceAttr,
    /// Largest inline payload of an RC QP (queried from a probe QP; 0 from
    /// [`probe_ports`], which skips it).
    pub max_inline: u32,
    /// Every port.
    pub ports: Vec<PortInfo>,
}

impl DeviceInfo {
    /// The first active port.
    pub fn active_port(&self) -> Option<&PortInfo> {
        self.ports.iter().find(|p| p.attr.active)
    }
}

/// The devices found, or why there are none.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// rdma-core could be loaded ([`crate::rdma_core::load`]); when false,
    /// `reason` is why not and there are no devices.
    pub loaded: bool,
    /// Devices that could be opened and queried.
    pub devices: Vec<DeviceInfo>,
    /// Why the list is empty or shorter than the device list (one line per problem).
    pub reason: Option<String>,
}

/// Lists and queries every verbs device, with the inline size of each (which
/// takes probe QPs). Never fails: without rdma-core or devices the list is
/// empty and `reason` says why.
pub fn probe() -> Probe {
    probe_devices(None, true)
}

/// [`probe`] of the device `only` (every device when `None`), with ports and
/// GIDs but without the inline probe: what [`crate::select`] needs to choose.
pub fn probe_ports(only: Option<&str>) -> Probe {
    probe_devices(only, false)
}

fn probe_devices(only: Option<&str>, inline: bool) -> Probe {
    if let Err(reason) = crate::rdma_core::load() {
        return Probe {
            loaded: false,
            devices: Vec::new(),
            reason: Some(reason),
        };
    }
    let names = match device_names() {
        Ok(n) => n,
        Err(reason) => {
            return Probe {
                loaded: true,
                devices: Vec::new(),
                reason: Some(reason),
            }
        }
    };
    let mut probe = Probe {
        loaded: true,
        ..Probe::default()
    };
    let mut problems = Vec::new();
    if names.is_empty() {
        problems.push("no verbs devices".to_owned());
    }
    for name in names.into_iter().filter(|n| only.is_none_or(|o| o == n)) {
        match device_info(&name, inline) {
            Ok(d) => probe.devices.push(d),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    if !problems.is_empty() {
        probe.reason = Some(problems.join("; "));
    }
    probe
}

fn device_info(name: &str, inline: bool) -> Result<DeviceInfo> {
    let ctx = Context::open(name)?;
    let attr = ctx.query_device()?;
    let mut ports = Vec::new();
    for port in 1..=attr.phys_port_cnt {
        let pattr = ctx.query_port(port)?;
        let gids = ctx.gids(port)?;
        ports.push(PortInfo { attr: pattr, gids });
    }
    let max_inline = if inline { ctx.probe_max_inline()? } else { 0 };
    Ok(DeviceInfo {
        name: name.to_owned(),
        attr,
        max_inline,
        ports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_formats_and_maps_ipv4() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 11, 0, 1]);
        let e = GidEntry {
            index: 1,
            gid,
            kind: "RoCE v2".into(),
        };
        assert_eq!(e.ipv4(), Some(Ipv4Addr::new(10, 11, 0, 1)));
        assert!(e.is_roce_v2());
        assert_eq!(e.to_string(), "0000:0000:0000:0000:0000:ffff:0a0b:0001 (RoCE v2)");
        let link_local = GidEntry {
            index: 0,
            gid: [0xfe; 16],
            kind: "IB/RoCE v1".into(),
        };
        assert_eq!(link_local.ipv4(), None);
        assert!(!link_local.is_roce_v2());
    }

    #[test]
    fn probe_never_fails() {
        let p = probe();
        if p.devices.is_empty() {
            assert!(p.reason.is_some(), "an empty probe says why");
        }
    }
}
