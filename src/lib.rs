//! xfer: one API for message, tagged and RMA operations over whichever
//! fabric the machine has — RDMA verbs when an HCA is present, TCP when not.
//!
//! ```
//! use xfer::{Completion, PeerAddr};
//!
//! # fn main() -> xfer::Result<()> {
//! let domain = xfer::open_default()?;
//! let cq = domain.cq(&xfer::CqAttr::from_env())?;
//! let av = domain.av()?;
//! let ep = domain.endpoint(&cq, &av, &xfer::EndpointAttr::from_env())?;
//!
//! // Talk to ourselves: insert our own name and send a tagged message.
//! let me = av.insert(ep.name().as_bytes())?;
//! ep.trecv(PeerAddr::UNSPEC, 42, 0, vec![0; 5], 1)?;
//! ep.tsend(me, 42, b"hello".to_vec(), 2)?;
//!
//! let mut done = vec![Completion::EMPTY; 4];
//! let mut seen = 0;
//! while seen < 2 {
//!     let n = cq.wait(&mut done, Some(std::time::Duration::from_secs(5)))?;
//!     for c in &done[..n] {
//!         c.result.clone()?;
//!         if c.context == 1 {
//!             assert_eq!(c.buf.as_deref(), Some(&b"hello"[..]));
//!         }
//!     }
//!     seen += n;
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub use xfer_core::attr::{self, Setting};
pub use xfer_core::provider;
pub use xfer_core::tag;
/// Rate-limited `tracing` warnings and errors (`xfer_core::log`), for the
/// crates built on the facade (the C ABI).
#[doc(hidden)]
pub use xfer_core::{error_limited, warn_limited};
pub use xfer_core::{Access, Claim, LocalDesc, MemoryRegion, Peeked, RemoteKey, RmaKind, RmaOp};
pub use xfer_core::{
    Address, AddressVector, Buffer, Completion, CompletionQueue, CqAttr, DomainAttr, Endpoint, EndpointAttr, Error,
    Flags, JobKey, PeerAddr, RecvOp, RecvSpec, Rejected, Result, SendOp, TcpAttr,
};

/// A domain (from xfer-core); open one with [`open`] or [`open_default`].
pub use xfer_core::Domain;

#[cfg(feature = "async")]
pub mod aio;
pub mod choice;
pub use choice::{Candidate, ProviderChoice, Verdict};

/// One provider as the facade sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Its name.
    pub name: &'static str,
    /// Whether it can be opened on this machine.
    pub available: bool,
    /// Why it can or cannot be used.
    pub detail: String,
}

/// The providers compiled in, in order of preference: `verbs` (when built
/// with the `verbs` feature, the default), then `tcp`.
pub const PROVIDERS: &[&str] = &[
    #[cfg(feature = "verbs")]
    "verbs",
    "tcp",
];

/// The providers compiled in, in order of preference, and whether each can run here.
///
/// `verbs` is available when a verbs device (`XFER_VERBS_DEVICE`, else any)
/// has its port `XFER_VERBS_PORT` active and an IPv4 address to listen on
/// (`XFER_VERBS_ADDR`, else the port's IPv4-mapped GID); its detail names the
/// device, port and address, or says why not. `tcp` is always available.
pub fn info() -> Vec<ProviderInfo> {
    let mut all = Vec::with_capacity(PROVIDERS.len());
    #[cfg(feature = "verbs")]
    all.push(verbs::info(&xfer_verbs::probe(), &xfer_verbs::VerbsAttr::from_env()));
    all.push(ProviderInfo {
        name: "tcp",
        available: true,
        detail: "TCP sockets; always available".into(),
    });
    all
}

/// Opens the built-in provider `name` (one of [`PROVIDERS`]).
fn open_named(name: &'static str) -> Result<Domain> {
    match name {
        #[cfg(feature = "verbs")]
        "verbs" => Ok(Domain::new(Box::new(xfer_verbs::VerbsDomain::open()?))),
        "tcp" => Ok(Domain::new(Box::new(xfer_tcp::TcpDomain::open()?))),
        _ => Err(Error::Internal("open_named: provider not built")),
    }
}

/// Opens a domain on the provider `attr` names, or else the first available
/// in order of preference (see [`info`]); an available provider that fails
/// to open is skipped for the next one. The choice and the reasons for
/// skipping others are logged through `tracing` ([`open_report`] returns them).
pub fn open(attr: &DomainAttr) -> Result<Domain> {
    open_report(attr).0
}

/// [`open`], and the report of its choice: the provider opened and why each
/// other one was not (unavailable and why, failed to open, outranked by a
/// preferred one, not the one `XFER_PROVIDER` asked for, not built).
///
/// ```
/// let (domain, choice) = xfer::open_report(&xfer::DomainAttr::from_env());
/// let domain = domain?;
/// assert_eq!(choice.chosen, Some(domain.provider()));
/// println!("{} chosen; not chosen: {}", domain.provider(), choice.why_not());
/// # Ok::<(), xfer::Error>(())
/// ```
pub fn open_report(attr: &DomainAttr) -> (Result<Domain>, ProviderChoice) {
    choice::choose(attr.provider.as_deref(), &info(), open_named)
}

/// [`open`] with attributes from the environment (`XFER_PROVIDER`).
pub fn open_default() -> Result<Domain> {
    open(&DomainAttr::from_env())
}

/// Installs a `tracing` subscriber filtered by `XFER_LOG` (e.g. `debug`,
/// `xfer_tcp=trace`), writing to stderr; for binaries and tests. Does
/// nothing when a subscriber is already set.
pub fn init_logging() {
    let filter = std::env::var("XFER_LOG").unwrap_or_else(|_| "warn".into());
    let filter =
        tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Availability of the verbs provider, from a device probe.
#[cfg(feature = "verbs")]
mod verbs {
    use xfer_verbs::{DeviceInfo, Probe, VerbsAttr};

    use crate::ProviderInfo;

    /// The `verbs` entry of [`crate::info`]: the device and port
    /// `VerbsDomain::open` would take with `attr`, or why there is none.
    pub(crate) fn info(probe: &Probe, attr: &VerbsAttr) -> ProviderInfo {
        let (available, detail) = match choose(probe, attr) {
            Ok(detail) => (true, detail),
            Err(why) => (false, why),
        };
        ProviderInfo {
            name: "verbs",
            available,
            detail,
        }
    }

    /// The first device (the one `attr.device` names, if set) whose port
    /// `attr.port` is active and has an address to listen on.
    fn choose(probe: &Probe, attr: &VerbsAttr) -> Result<String, String> {
        let candidates: Vec<&DeviceInfo> = match &attr.device {
            Some(name) => probe.devices.iter().filter(|d| &d.name == name).collect(),
            None => probe.devices.iter().collect(),
        };
        if candidates.is_empty() {
            let found: Vec<&str> = probe.devices.iter().map(|d| d.name.as_str()).collect();
            let why = match (&attr.device, &probe.reason) {
                (Some(name), Some(reason)) => format!("XFER_VERBS_DEVICE={name}: not found or not usable ({reason})"),
                (Some(name), None) => format!("XFER_VERBS_DEVICE={name}: no such device (found: {})", found.join(", ")),
                (None, Some(reason)) if reason.starts_with("no verbs devices") => reason.clone(),
                (None, Some(reason)) => format!("no usable verbs device: {reason}"),
                (None, None) => "no verbs devices".into(),
            };
            return Err(why);
        }
        let mut why = Vec::new();
        for dev in candidates {
            let Some(port) = dev.ports.iter().find(|p| p.attr.port == attr.port) else {
                why.push(format!("{}: no port {}", dev.name, attr.port));
                continue;
            };
            if !port.attr.active {
                why.push(format!("{}: port {} not active", dev.name, attr.port));
                continue;
            }
            match xfer_verbs::listen_ip(&port.gids, attr) {
                Some(ip) => {
                    return Ok(format!(
                        "{} port {} ({}, MTU {}), listening on {ip}",
                        dev.name, attr.port, port.attr.link_layer, port.attr.active_mtu
                    ))
                }
                None => why.push(format!(
                    "{} port {} has no IPv4 GID; set XFER_VERBS_ADDR to its IP (IPoIB) address",
                    dev.name, attr.port
                )),
            }
        }
        if let Some(reason) = &probe.reason {
            why.push(reason.clone());
        }
        Err(why.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_provider_lists_the_built_in_ones() {
        let attr = DomainAttr {
            provider: Some("nope".into()),
        };
        let Err(Error::NoProvider(msg)) = open(&attr) else {
            panic!("opened an unknown provider");
        };
        assert!(msg.contains("\"nope\""), "{msg}");
        assert!(msg.contains(&format!("built in: {}", PROVIDERS.join(", "))), "{msg}");
    }

    #[test]
    fn open_report_names_the_provider_opened_and_why_not_the_others() {
        let (domain, choice) = open_report(&DomainAttr {
            provider: Some("tcp".into()),
        });
        assert_eq!(domain.expect("tcp opens").provider(), "tcp");
        assert_eq!(choice.chosen, Some("tcp"));
        assert_eq!(choice.forced.as_deref(), Some("tcp"));
        let want = if cfg!(feature = "verbs") {
            Verdict::NotRequested("tcp".into())
        } else {
            Verdict::NotBuilt("verbs")
        };
        assert_eq!(choice.verdict("verbs"), Some(&want));

        // Unforced: whatever was chosen, every other provider says why not.
        let (domain, choice) = open_report(&DomainAttr { provider: None });
        assert_eq!(choice.chosen, Some(domain.expect("a provider opens").provider()));
        for c in &choice.candidates {
            let expected = match (&c.verdict, info().iter().find(|p| p.name == c.name)) {
                (Verdict::Chosen(_), Some(p)) => p.available,
                (Verdict::Unavailable(why), Some(p)) => !p.available && why == &p.detail,
                (Verdict::Outranked(_) | Verdict::Failed(_), Some(p)) => p.available,
                (Verdict::NotBuilt(_), None) => true,
                _ => false,
            };
            assert!(expected, "{}: {}", c.name, c.verdict);
        }
    }

    #[test]
    fn info_lists_every_provider_in_order() {
        let names: Vec<&str> = info().iter().map(|p| p.name).collect();
        assert_eq!(names, PROVIDERS);
        assert_eq!(PROVIDERS.last(), Some(&"tcp"));
        assert!(info().iter().all(|p| !p.detail.is_empty()));
    }

    #[cfg(feature = "verbs")]
    mod verbs {
        use xfer_verbs::device::PortInfo;
        use xfer_verbs::{DeviceAttr, DeviceInfo, GidEntry, PortAttr, Probe, VerbsAttr};

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

        #[test]
        fn no_devices_gives_the_probe_reason() {
            let probe = Probe {
                devices: Vec::new(),
                reason: Some("ibv_get_device_list failed: ENOSYS".into()),
            };
            let p = super::super::verbs::info(&probe, &VerbsAttr::default());
            assert_eq!(p.name, "verbs");
            assert!(!p.available);
            assert_eq!(p.detail, "no usable verbs device: ibv_get_device_list failed: ENOSYS");
            let probe = Probe {
                devices: Vec::new(),
                reason: Some("no verbs devices".into()),
            };
            let p = super::super::verbs::info(&probe, &VerbsAttr::default());
            assert!(!p.available);
            assert_eq!(p.detail, "no verbs devices");
        }

        #[test]
        fn first_active_device_with_an_address() {
            let probe = Probe {
                devices: vec![
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
                reason: None,
            };
            let info = |attr: &VerbsAttr| super::super::verbs::info(&probe, attr);
            let p = info(&VerbsAttr::default());
            assert!(p.available, "{}", p.detail);
            assert!(p.detail.starts_with("rxe2 port 1"), "{}", p.detail);
            assert!(p.detail.ends_with("listening on 10.0.0.3"), "{}", p.detail);

            let p = info(&VerbsAttr {
                device: Some("rxe0".into()),
                ..VerbsAttr::default()
            });
            assert!(!p.available);
            assert_eq!(p.detail, "rxe0: port 1 not active");

            let p = info(&VerbsAttr {
                device: Some("rxe1".into()),
                ..VerbsAttr::default()
            });
            assert!(!p.available);
            assert!(p.detail.contains("XFER_VERBS_ADDR"), "{}", p.detail);
            let p = info(&VerbsAttr {
                device: Some("rxe1".into()),
                addr: Some([192, 168, 1, 1].into()),
                ..VerbsAttr::default()
            });
            assert!(
                p.available && p.detail.ends_with("listening on 192.168.1.1"),
                "{}",
                p.detail
            );

            let p = info(&VerbsAttr {
                device: Some("mlx5_0".into()),
                ..VerbsAttr::default()
            });
            assert!(!p.available);
            assert_eq!(
                p.detail,
                "XFER_VERBS_DEVICE=mlx5_0: no such device (found: rxe0, rxe1, rxe2)"
            );

            let p = info(&VerbsAttr {
                port: 2,
                ..VerbsAttr::default()
            });
            assert!(!p.available);
            assert_eq!(p.detail, "rxe0: no port 2; rxe1: no port 2; rxe2: no port 2");
        }
    }
}
