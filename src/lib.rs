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
//!
//! # Errors
//!
//! Calls return [`Error`]; posting calls that take a buffer return
//! [`Rejected`], which hands the buffer back with the reason. Both are
//! `std::error::Error`s and both convert to `std::io::Error` (with an
//! [`ErrorKind`](std::io::ErrorKind) from [`Error::io_kind`]), so `?` works
//! in functions returning `xfer::Result`, `std::io::Result`,
//! `Box<dyn Error + Send + Sync>` or `anyhow::Result`:
//!
//! ```
//! use std::error::Error;
//!
//! fn hello_boxed(ep: &xfer::Endpoint, to: xfer::PeerAddr) -> Result<(), Box<dyn Error + Send + Sync>> {
//!     ep.tsend(to, 42, b"hello".to_vec(), 1)?;
//!     Ok(())
//! }
//!
//! fn hello_io(ep: &xfer::Endpoint, to: xfer::PeerAddr) -> std::io::Result<()> {
//!     ep.tsend(to, 42, b"hello".to_vec(), 1)?;
//!     Ok(())
//! }
//!
//! # fn main() -> Result<(), Box<dyn Error + Send + Sync>> {
//! let domain = xfer::open_default()?;
//! let cq = domain.cq(&xfer::CqAttr::from_env())?;
//! let av = domain.av()?;
//! let ep = domain.endpoint(&cq, &av, &xfer::EndpointAttr::from_env())?;
//! let nobody = xfer::PeerAddr(12345); // never inserted
//!
//! let e = hello_boxed(&ep, nobody).unwrap_err();
//! let rejected = e.downcast::<xfer::Rejected<Vec<u8>>>().expect("the refusal itself");
//! assert_eq!(rejected.error, xfer::Error::AddressNotAvailable);
//! assert_eq!(rejected.op, b"hello", "the buffer comes back");
//!
//! let e = hello_io(&ep, nobody).unwrap_err();
//! assert_eq!(e.kind(), std::io::ErrorKind::AddrNotAvailable);
//! assert_eq!(xfer::Error::from(e), xfer::Error::AddressNotAvailable);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Rate-limited `tracing` warnings and errors (`xfer_core::log`), for the
/// crates built on the facade (the C ABI).
#[doc(hidden)]
pub use xfer_core::{error_limited, warn_limited};
pub use xfer_core::{Access, Claim, LocalDesc, MemoryRegion, Peeked, RemoteKey, RmaKind, RmaOp};
pub use xfer_core::{
    Address, AddressVector, Buffer, Completion, CompletionLevel, CompletionQueue, CqAttr, DomainAttr, Endpoint,
    EndpointAttr, Error, Flags, JobKey, Params, PeerAddr, PeerEvent, PeerEventKind, RecvOp, RecvSpec, Rejected, Result,
    SendOp, Setting, Threading,
};
pub use xfer_core::{AtomicCaps, AtomicKind, AtomicMode, AtomicOp, Datatype};
/// The TCP transport's typed settings (keys `tcp.*` of [`Params`]).
pub use xfer_tcp::TcpAttr;
/// The verbs transport's typed settings (keys `verbs.*` of [`Params`]).
#[cfg(feature = "verbs")]
#[cfg_attr(docsrs, doc(cfg(feature = "verbs")))]
pub use xfer_verbs::VerbsAttr;

/// A domain (from xfer-core); open one with [`open`] or [`open_default`].
pub use xfer_core::Domain;

#[cfg(feature = "async")]
#[cfg_attr(docsrs, doc(cfg(feature = "async")))]
pub mod aio;
mod choice;
pub use choice::{Candidate, ProviderChoice, Verdict};
mod connection;
pub use connection::{connect, listen, Connection, Listener};
pub mod mixed;
mod settings;
pub use settings::{check_param, check_params, default_transport_settings, transport_settings, TRANSPORTS};

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

/// The providers compiled in, in order of preference: `shm+verbs` (when
/// built with the `verbs` feature, the default: shared memory to peers on
/// this host, verbs to others, chosen per peer), `verbs` (verbs to every
/// peer), `shm+tcp` (shared memory to peers on this host, TCP to others),
/// `tcp`, then `shm` (peers on this host only: opened when `XFER_PROVIDER=shm`
/// asks for it). Every one is core's RDM engine over its transports.
pub const PROVIDERS: &[&str] = &[
    #[cfg(feature = "verbs")]
    "shm+verbs",
    #[cfg(feature = "verbs")]
    "verbs",
    "shm+tcp",
    "tcp",
    "shm",
];

/// The providers compiled in, in order of preference, and whether each can
/// run here with settings from the environment: [`info_for`] of
/// [`DomainAttr::from_env`].
pub fn info() -> Vec<ProviderInfo> {
    info_for(&DomainAttr::from_env())
}

/// The providers compiled in, in order of preference, and whether each can
/// run here with the settings of `attr` (its params over the environment):
/// what [`open`] with `attr` chooses from.
///
/// `verbs` is available when a verbs device (`verbs.device`, else any)
/// has its port `verbs.port` active and an IPv4 address to listen on
/// (`verbs.addr`, else the port's IPv4-mapped GID): the choice
/// `VerbsDomain::with_params` makes, by the same function
/// (`xfer_verbs::choose`); `shm+verbs` where `verbs` is. Its detail names the device, port and address,
/// or says why not. `tcp` is always available.
pub fn info_for(attr: &DomainAttr) -> Vec<ProviderInfo> {
    let mut all = Vec::with_capacity(PROVIDERS.len());
    #[cfg(feature = "verbs")]
    all.push(verbs::info_shm_verbs(&attr.params));
    #[cfg(feature = "verbs")]
    all.push(verbs::info(&attr.params));
    #[cfg(not(feature = "verbs"))]
    let _ = attr;
    all.push(ProviderInfo {
        name: mixed::NAME,
        available: true,
        detail: "shared memory to peers on this host, TCP to others, chosen per peer".into(),
    });
    all.push(ProviderInfo {
        name: "tcp",
        available: true,
        detail: "TCP sockets to every peer, this host's too (XFER_PROVIDER=tcp)".into(),
    });
    all.push(ProviderInfo {
        name: "shm",
        available: true,
        detail: "shared memory; peers on this host only (XFER_PROVIDER=shm)".into(),
    });
    all
}

/// Opens the built-in provider `name` (one of [`PROVIDERS`]) with the
/// transport settings, atomic mode and threading mode of `attr`;
/// `serialized_ok`: the caller of [`open_serialized`] made its promise.
fn open_named(name: &'static str, attr: &DomainAttr, serialized_ok: bool) -> Result<Domain> {
    let params = &attr.params;
    let domain = |prov: Box<dyn xfer_core::unstable::provider::DomainProvider>| match serialized_ok {
        // SAFETY: `open_serialized`'s caller promised that calls never overlap.
        true => Ok(unsafe { Domain::with_threading_unchecked(prov, attr.threading) }),
        false => Domain::with_threading(prov, attr.threading),
    };
    match name {
        #[cfg(feature = "verbs")]
        "verbs" => {
            let mut d = xfer_verbs::VerbsDomain::with_params(params)?;
            d.set_atomic_mode(attr.atomic_mode, true)?;
            domain(Box::new(d))
        }
        "tcp" => domain(Box::new(xfer_tcp::TcpDomain::with_params(params)?)),
        "shm" => domain(Box::new(xfer_shm::ShmDomain::with_params(params)?)),
        mixed::NAME => domain(Box::new(mixed::ShmTcpDomain::with_params(params)?)),
        #[cfg(feature = "verbs")]
        mixed::SHM_VERBS => {
            let mut d = mixed::ShmVerbsDomain::with_params(params)?;
            d.set_atomic_mode(attr.atomic_mode)?;
            domain(Box::new(d))
        }
        _ => Err(Error::Internal("open_named: provider not built")),
    }
}

/// Opens a domain on the provider `attr` names, or else the first available
/// in order of preference (see [`info_for`]); an available provider that fails
/// to open is skipped for the next one. The transport settings of
/// `attr.params` are checked first ([`check_params`]): a bad one fails the
/// call with [`Error::InvalidSetting`] naming it. The choice and the reasons for
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
    open_checked(attr, false)
}

/// [`open`] in [`Threading::Serialized`] mode whatever `attr.threading`
/// says: no lock taken on any call, and any thread may call, one at a
/// time. What libfabric's `FI_THREAD_DOMAIN` promises, for layers whose
/// callers make that promise (the libfabric plug-in).
///
/// # Safety
/// No two calls into the domain or anything opened from it (endpoints,
/// completion queues, address vectors, regions, and their drops) may
/// overlap, from whatever threads they come: nothing in the domain keeps
/// them apart, and overlapping calls race on its state.
pub unsafe fn open_serialized(attr: &DomainAttr) -> Result<Domain> {
    let mut attr = attr.clone();
    attr.threading = Threading::Serialized;
    open_checked(&attr, true).0
}

fn open_checked(attr: &DomainAttr, serialized_ok: bool) -> (Result<Domain>, ProviderChoice) {
    // A refused threading mode fails before any provider is opened.
    let refused = match serialized_ok {
        true => Ok(()),
        false => attr.threading.safe_to_open(),
    };
    if let Err(e) = refused.and_then(|()| check_params(&attr.params)) {
        let choice = ProviderChoice {
            chosen: None,
            forced: attr.provider.clone(),
            candidates: Vec::new(),
        };
        return (Err(e), choice);
    }
    choice::choose(attr.provider.as_deref(), &info_for(attr), |name| {
        open_named(name, attr, serialized_ok)
    })
}

/// [`open`] with attributes from the environment (`XFER_PROVIDER`).
pub fn open_default() -> Result<Domain> {
    open(&DomainAttr::from_env())
}

/// Installs a `tracing` subscriber filtered by `XFER_LOG` (e.g. `debug`,
/// `xfer_tcp=trace`), writing to stderr; for binaries and tests. Does
/// nothing when a subscriber is already set. Feature `logging` (default).
///
/// ```
/// xfer::init_logging(); // XFER_LOG=debug shows the provider choice
/// let _domain = xfer::open_default()?;
/// # Ok::<(), xfer::Error>(())
/// ```
#[cfg(feature = "logging")]
#[cfg_attr(docsrs, doc(cfg(feature = "logging")))]
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
    use xfer_verbs::VerbsAttr;

    use crate::{Params, ProviderInfo};

    /// The `verbs` entry of [`crate::info_for`]: the device, port and
    /// address `VerbsDomain::with_params` opens with `params` (the same
    /// settings and the same [`xfer_verbs::choose`]), or why there is none:
    /// a bad setting, no rdma-core, no device, port down, no address.
    pub(crate) fn info(params: &Params) -> ProviderInfo {
        let (available, detail) = match VerbsAttr::from_params(params).map(|attr| xfer_verbs::choose(&attr)) {
            Ok(Ok(sel)) => (true, sel.to_string()),
            Ok(Err(why)) => (false, why.to_string()),
            Err(bad) => (false, bad.to_string()),
        };
        ProviderInfo {
            name: "verbs",
            available,
            detail,
        }
    }

    /// The `shm+verbs` entry: available where `verbs` is.
    pub(crate) fn info_shm_verbs(params: &Params) -> ProviderInfo {
        let v = info(params);
        ProviderInfo {
            name: crate::mixed::SHM_VERBS,
            available: v.available,
            detail: if v.available {
                format!(
                    "{}; shared memory to peers on this host, verbs to others, chosen per peer",
                    v.detail
                )
            } else {
                v.detail
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_provider_lists_the_built_in_ones() {
        let attr = DomainAttr::with_provider("nope");
        let Err(Error::NoProvider(msg)) = open(&attr) else {
            panic!("opened an unknown provider");
        };
        assert!(msg.contains("\"nope\""), "{msg}");
        assert!(msg.contains(&format!("built in: {}", PROVIDERS.join(", "))), "{msg}");
    }

    #[test]
    fn open_report_names_the_provider_opened_and_why_not_the_others() {
        let (domain, choice) = open_report(&DomainAttr::with_provider("tcp"));
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
        let (domain, choice) = open_report(&DomainAttr::default());
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

    /// The report and the opening of verbs take the same settings and the
    /// same choice: where the report says verbs is unusable, opening it
    /// fails with the very same reason (on a host without an HCA, every
    /// case here; with one, an available report means the choice opened).
    #[cfg(feature = "verbs")]
    #[test]
    fn the_verbs_report_and_opening_verbs_say_the_same() {
        let mut cases = vec![Params::new()];
        for (key, value) in [
            ("verbs.device", "xfer-no-such-dev0"),
            ("verbs.port", "9"),
            ("verbs.port", "one"),
        ] {
            let mut p = Params::new();
            p.set(key, value);
            cases.push(p);
        }
        for params in cases {
            let mut attr = DomainAttr::with_provider("verbs");
            attr.params = params.clone();
            let report = info_for(&attr)
                .into_iter()
                .find(|p| p.name == "verbs")
                .expect("verbs listed");
            let opened = xfer_verbs::VerbsDomain::with_params(&params);
            match opened {
                Ok(_) => assert!(report.available, "{params:?}: opened, yet reported: {}", report.detail),
                Err(e) => {
                    let why = match e {
                        Error::NoProvider(why) => why,
                        other => other.to_string(),
                    };
                    assert!(!report.available, "{params:?}: reported usable, opening failed: {why}");
                    assert_eq!(report.detail, why, "{params:?}");
                    // Through the facade's choice too: forced, the failure carries the reason.
                    let e = open(&attr).expect_err("verbs unusable");
                    assert!(e.to_string().contains(&report.detail), "{e} / {}", report.detail);
                }
            }
        }
    }

    #[test]
    fn a_bad_setting_fails_open_and_names_the_key() {
        let mut attr = DomainAttr::with_provider("tcp");
        attr.params.set("tcp.ifcae", "lo");
        let Err(Error::InvalidSetting(why)) = open(&attr) else {
            panic!("a misspelt key was accepted");
        };
        assert!(why.contains("tcp.ifcae"), "{why}");
        attr.params.remove("tcp.ifcae");
        attr.params.set("tcp.coalesce", "0");
        assert_eq!(open(&attr).expect("valid settings").provider(), "tcp");
    }

    #[test]
    fn info_lists_every_provider_in_order() {
        let names: Vec<&str> = info().iter().map(|p| p.name).collect();
        assert_eq!(names, PROVIDERS);
        let head = if cfg!(feature = "verbs") { 2 } else { 0 };
        assert_eq!(PROVIDERS[head..], ["shm+tcp", "tcp", "shm"], "shm+tcp preferred to tcp");
        if cfg!(feature = "verbs") {
            assert_eq!(
                PROVIDERS[..2],
                ["shm+verbs", "verbs"],
                "each pair before what it includes"
            );
        }
        assert!(info().iter().all(|p| !p.detail.is_empty()));
    }
}
