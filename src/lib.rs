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
pub use xfer_core::{Access, MemoryRegion, RemoteKey, RmaKind, RmaOp};
pub use xfer_core::{
    Address, AddressVector, Buffer, Completion, CompletionQueue, CqAttr, DomainAttr, Endpoint, EndpointAttr, Error,
    Flags, PeerAddr, RecvOp, RecvSpec, Rejected, Result, SendOp, TcpAttr,
};

/// A domain (from xfer-core); open one with [`open`] or [`open_default`].
pub use xfer_core::Domain;

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

/// The providers compiled in, in order of preference, and whether each can run here.
pub fn info() -> Vec<ProviderInfo> {
    vec![ProviderInfo {
        name: "tcp",
        available: true,
        detail: "TCP sockets; always available".into(),
    }]
}

fn open_named(name: &str) -> Result<Domain> {
    match name {
        "tcp" => Ok(Domain::new(Box::new(xfer_tcp::TcpDomain::open()?))),
        other => Err(Error::NoProvider(format!("unknown provider {other:?} (built in: tcp)"))),
    }
}

/// Opens a domain on the provider `attr` names, or else the first available
/// in order of preference; the choice and the reasons for skipping others
/// are logged through `tracing`.
pub fn open(attr: &DomainAttr) -> Result<Domain> {
    if let Some(name) = &attr.provider {
        tracing::info!(provider = %name, "provider forced by XFER_PROVIDER");
        return open_named(name);
    }
    let mut why = Vec::new();
    for p in info() {
        if !p.available {
            tracing::debug!(provider = p.name, reason = %p.detail, "provider skipped");
            why.push(format!("{}: {}", p.name, p.detail));
            continue;
        }
        match open_named(p.name) {
            Ok(d) => {
                tracing::info!(provider = p.name, "provider chosen");
                return Ok(d);
            }
            Err(e) => why.push(format!("{}: {e}", p.name)),
        }
    }
    Err(Error::NoProvider(why.join("; ")))
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
