//! Attributes: every tunable with its default, its `XFER_*` environment
//! variable and its field.
//!
//! `from_env()` starts from the defaults and applies the environment; a value
//! that does not parse is reported through `tracing` and ignored, never
//! silently half-applied. [`Setting`] rows let `xfer-info` print the effective
//! configuration.

use std::str::FromStr;

use crate::error::Error;
use crate::params::Params;

/// One effective setting, for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// Its key in [`Params`] (`tcp.iface`) for a transport's setting; `None`
    /// for core's own, which are fields of the attribute structs.
    pub key: Option<&'static str>,
    /// The environment variable.
    pub env: &'static str,
    /// The effective value.
    pub value: String,
    /// What it controls.
    pub doc: &'static str,
}

/// A mode named by variable `name` (its `FromStr` says what is refused and
/// why, logged), else the default.
fn env_mode<T: FromStr<Err = crate::Error> + Default>(name: &str) -> T {
    let Some(m) = env_value::<String>(name) else {
        return T::default();
    };
    m.parse()
        .map_err(|e| tracing::warn!(var = name, value = %m, error = %e, "ignoring the setting"))
        .unwrap_or_default()
}

/// Reads `name` from the environment and parses it; logs and ignores bad values.
pub fn env_value<T: FromStr>(name: &str) -> Option<T> {
    let raw = std::env::var(name).ok()?;
    match parse_size(&raw)
        .and_then(|n| raw_to::<T>(&n.to_string()))
        .or_else(|| raw_to(&raw))
    {
        Some(v) => Some(v),
        None => {
            tracing::warn!(var = name, value = %raw, "ignoring unparsable environment value");
            None
        }
    }
}

fn raw_to<T: FromStr>(s: &str) -> Option<T> {
    s.trim().parse().ok()
}

/// Parses the value of the setting `key` as the environment does (sizes
/// with `k`/`M`/`g` suffixes); a value that does not parse is
/// [`Error::InvalidSetting`] naming the key and the value.
pub fn param_value<T: FromStr>(key: &str, raw: &str) -> Result<T, Error> {
    parse_size(raw)
        .and_then(|n| raw_to::<T>(&n.to_string()))
        .or_else(|| raw_to(raw))
        .ok_or_else(|| Error::InvalidSetting(format!("{key}={raw:?}: not a valid value").into()))
}

/// A yes/no setting's value: `1`, `true`, `yes`, `on`, `0`, `false`, `no`,
/// `off` (any case); anything else is [`Error::InvalidSetting`].
pub fn param_flag(key: &str, raw: &str) -> Result<bool, Error> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::InvalidSetting(
            format!("{key}={raw:?}: not a yes/no value").into(),
        )),
    }
}

/// The error for a key under a transport's prefix that the transport does
/// not have: names the key and lists the ones it has.
pub fn unknown_key(key: &str, known: &[Setting]) -> Error {
    let names: Vec<&str> = known.iter().filter_map(|s| s.key).collect();
    Error::InvalidSetting(format!("unknown setting {key} (known: {})", names.join(", ")).into())
}

/// Parses sizes such as `4096`, `64k`, `1M`, `2g` (powers of 1024).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

fn apply<T: FromStr>(field: &mut T, env: &str) {
    if let Some(v) = env_value(env) {
        *field = v;
    }
}

/// A yes/no setting from the environment: `1`, `true`, `yes` or `on`, and
/// `0`, `false`, `no` or `off` (any case); `None` when unset or anything
/// else (with a warning for the latter).
pub fn env_flag(name: &str) -> Option<bool> {
    let v = std::env::var(name).ok()?;
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => {
            tracing::warn!(name, value = %v, "not a yes/no value; the default applies");
            None
        }
    }
}

/// Attributes of a domain.
///
/// The attribute structs may gain fields (`#[non_exhaustive]`): start from
/// `default()` or `from_env()` and set the fields you need.
///
/// ```
/// let mut ep_attr = xfer_core::EndpointAttr::from_env();
/// ep_attr.selective_completion = true;
/// ep_attr.params.set("tcp.coalesce", "0");
/// let mut attr = xfer_core::DomainAttr::with_provider("tcp");
/// attr.params.set("tcp.iface", "eth0");
/// assert_eq!(attr.provider.as_deref(), Some("tcp"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DomainAttr {
    /// Force a provider by name (`tcp`, `verbs`); `None` picks the best available.
    pub provider: Option<String>,
    /// Transport settings (`verbs.device`, `tcp.iface`, ...): the domain's
    /// transport takes its own, and every endpoint of the domain starts from
    /// these (its own [`EndpointAttr::params`] override them).
    pub params: Params,
    /// Who does remote atomics on the domain's registered regions: the
    /// target's CPU or the initiators' devices (`XFER_ATOMIC_MODE`: `cpu`,
    /// the default, `auto`, `device`; see [`AtomicMode`](crate::AtomicMode)).
    pub atomic_mode: crate::AtomicMode,
    /// Which threads may call into the domain (`XFER_THREADING`: `safe`,
    /// the default, any thread under a mutex; `single`, only the thread
    /// that opens it, with no lock taken; see [`Threading`](crate::Threading)).
    pub threading: crate::Threading,
}

impl DomainAttr {
    /// Attributes that force the provider `name` (`tcp`, `verbs`).
    pub fn with_provider(name: impl Into<String>) -> Self {
        DomainAttr {
            provider: Some(name.into()),
            ..DomainAttr::from_env()
        }
    }

    /// Defaults overridden by the environment.
    pub fn from_env() -> Self {
        DomainAttr {
            provider: std::env::var("XFER_PROVIDER").ok().filter(|p| !p.is_empty()),
            params: Params::new(),
            atomic_mode: env_mode("XFER_ATOMIC_MODE"),
            threading: env_mode("XFER_THREADING"),
        }
    }

    /// The effective settings.
    pub fn settings(&self) -> Vec<Setting> {
        vec![
            Setting {
                key: None,
                env: "XFER_PROVIDER",
                value: self.provider.clone().unwrap_or_else(|| "(auto)".into()),
                doc: "provider to use instead of the automatic choice",
            },
            Setting {
                key: None,
                env: "XFER_ATOMIC_MODE",
                value: self.atomic_mode.to_string(),
                doc: "who does remote atomics: auto, cpu (the target's CPU), device (the initiators' verbs devices)",
            },
            Setting {
                key: None,
                env: "XFER_THREADING",
                value: self.threading.to_string(),
                doc: "which threads may call into a domain: safe (any, under a mutex), single (only the opening thread, no lock)",
            },
        ]
    }
}

/// Attributes of a completion queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CqAttr {
    /// Entries preallocated; the queue grows past this rather than lose a
    /// completion, but growing allocates.
    pub size: usize,
}

impl Default for CqAttr {
    fn default() -> Self {
        CqAttr { size: 4096 }
    }
}

impl CqAttr {
    /// Defaults overridden by the environment.
    pub fn from_env() -> Self {
        let mut a = Self::default();
        apply(&mut a.size, "XFER_CQ_SIZE");
        a
    }

    /// The effective settings.
    pub fn settings(&self) -> Vec<Setting> {
        vec![Setting {
            key: None,
            env: "XFER_CQ_SIZE",
            value: self.size.to_string(),
            doc: "completion queue entries preallocated",
        }]
    }
}

/// A job key (`EndpointAttr::job_key`): bytes that stay out of logs and
/// `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey(pub Vec<u8>);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobKey(..)")
    }
}

/// Attributes of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointAttr {
    /// Messages longer than this use the rendezvous protocol; shorter ones
    /// are sent eagerly.
    pub rndv_threshold: usize,
    /// Largest payload accepted by `inject`.
    pub inject_size: usize,
    /// Only operations that ask for a completion report success (libfabric's
    /// `FI_SELECTIVE_COMPLETION`); errors are always reported.
    pub selective_completion: bool,
    /// Most operations that report a completion (receives, and sends and
    /// RMA unless unsignaled under selective completion) the endpoint keeps
    /// outstanding; posting one more fails with `Error::Again` until a
    /// completion comes. 0: unbounded.
    pub max_outstanding: usize,
    /// Most sends and RMA operations that report a completion the endpoint
    /// keeps outstanding to any one peer; posting one more to that peer
    /// fails with `Error::Again` until one of them completes (receives are
    /// not per peer: `max_outstanding` bounds them). 0: unbounded.
    pub max_outstanding_per_peer: usize,
    /// Milliseconds a peer may make no progress while operations wait for
    /// it before they fail with [`Error::Stalled`](crate::Error::Stalled)
    /// (`FI_ETIMEDOUT`): a peer whose process is stopped or hung but whose
    /// kernel or HCA still acknowledges, which keepalive, the TCP user
    /// timeout and RC retries never notice. A silent connection with
    /// operations waiting is probed at half the time; any answer, or anything
    /// else from the peer's process, counts as progress, so a peer that is
    /// merely slow to post a receive is not affected. 0 (the default): off,
    /// as a process stopped in a debugger must not break its job; RPC users
    /// who want deadlines set it. TCP and verbs.
    pub progress_timeout_ms: u64,
    /// Admission: when set, a peer connecting to this endpoint must prove it
    /// holds the same key (an HMAC-SHA-256 over a fresh challenge; the key
    /// never travels) before anything it sends is delivered; a peer without
    /// it is refused (counter `admission_refused`). An endpoint with a key
    /// also answers such challenges when it connects. `None` (the default):
    /// anyone who can reach the port is served. TCP and verbs (there the
    /// exchange rides in rdma_cm's private data).
    pub job_key: Option<JobKey>,
    /// Receive memory: the most the endpoint commits to what its peers
    /// may make it hold (their eager credit in flight, messages kept
    /// unexpected until a receive takes them, connection state). A peer
    /// that would take it past this is refused when it connects (counter
    /// `rx_memory_refused`), and credit beyond a connection's initial is
    /// granted only while it fits; connections the endpoint's own user
    /// opens are admitted regardless. Counters `rx_memory` (committed) and
    /// `rx_memory_refused`; docs/PROTOCOL.md "Receive memory" gives the
    /// worst case per peer. TCP and verbs.
    pub rx_memory: u64,
    /// A message (or a write with immediate data) from a sender whose name
    /// is not in the address vector completes with
    /// [`Error::UnknownSource`](crate::Error::UnknownSource),
    /// which carries that name, instead of succeeding with an unspecified
    /// source (libfabric's `FI_SOURCE_ERR`); the message is received either
    /// way. A truncated message reports its truncation instead. Off by
    /// default.
    pub source_err: bool,
    /// Peer events ([`Endpoint::peer_event`](crate::Endpoint::peer_event)):
    /// how many the endpoint queues at most before dropping new ones
    /// (counted as `peer_events_lost`). 0 (the default): off.
    pub peer_events: usize,
    /// RMA a peer applies to this endpoint's memory is reported on its
    /// completion queue: each write (`RMA | REMOTE_WRITE`) and each read
    /// (`RMA | REMOTE_READ`) the target served, with its length, source
    /// and context 0 (libfabric's `FI_RMA_EVENT`, for remote counters).
    /// Writes with immediate data are reported either way. Only a
    /// provider that serves RMA itself can see it: TCP; an endpoint of a
    /// provider that cannot (verbs: the NIC applies RDMA unseen) is refused
    /// with [`Error::NotSupported`](crate::Error::NotSupported). Off by default.
    pub rma_events: bool,
    /// Microseconds a wait on a peer may see nothing move before each
    /// further progress call that sees nothing move yields the CPU
    /// (`sched_yield`): a sender whose transport refused a frame as full
    /// or whose sends wait for the peer's answer (a rendezvous being
    /// pulled), an initiator whose RMA or atomic the target's engine serves
    /// (not one a device moves), a receiver taking a push only its sender
    /// can finish. A peer sharing
    /// this CPU (more processes than CPUs) then runs instead of waiting for
    /// the scheduler's time slice; with a CPU each the call returns at once.
    /// Waits for messages with nothing in flight never yield. 0: never
    /// yield. Default 20.
    pub yield_after_us: u64,
    /// Transport settings for this endpoint (`tcp.iface`, `tcp.coalesce`,
    /// ...), over its domain's [`DomainAttr::params`]; the endpoint's
    /// transport parses its own keys when the endpoint opens.
    pub params: Params,
}

impl Default for EndpointAttr {
    fn default() -> Self {
        EndpointAttr {
            rndv_threshold: 64 << 10,
            inject_size: 4096,
            selective_completion: false,
            max_outstanding: 0,
            max_outstanding_per_peer: 0,
            progress_timeout_ms: 0,
            job_key: None,
            rx_memory: 1 << 30,
            source_err: false,
            peer_events: 0,
            rma_events: false,
            yield_after_us: 20,
            params: Params::new(),
        }
    }
}

impl EndpointAttr {
    /// Refuses an inject payload longer than `inject_size`.
    pub fn check_inject(&self, len: usize) -> crate::error::Result<()> {
        if len > self.inject_size {
            return Err(crate::error::Error::InvalidArgument(
                "inject payload exceeds the endpoint's inject_size",
            ));
        }
        Ok(())
    }

    /// Defaults overridden by the environment.
    pub fn from_env() -> Self {
        let mut a = Self::default();
        apply(&mut a.rndv_threshold, "XFER_RNDV_THRESHOLD");
        apply(&mut a.inject_size, "XFER_INJECT_SIZE");
        apply(&mut a.max_outstanding, "XFER_MAX_OUTSTANDING");
        apply(&mut a.max_outstanding_per_peer, "XFER_MAX_OUTSTANDING_PER_PEER");
        apply(&mut a.progress_timeout_ms, "XFER_PROGRESS_TIMEOUT_MS");
        apply(&mut a.rx_memory, "XFER_RX_MEMORY");
        apply(&mut a.peer_events, "XFER_PEER_EVENTS");
        apply(&mut a.yield_after_us, "XFER_YIELD_AFTER_US");
        if let Some(k) = std::env::var_os("XFER_JOB_KEY").filter(|k| !k.is_empty()) {
            a.job_key = Some(JobKey(std::os::unix::ffi::OsStrExt::as_bytes(k.as_os_str()).to_vec()));
        }
        if let Some(v) = env_flag("XFER_SELECTIVE_COMPLETION") {
            a.selective_completion = v;
        }
        if let Some(v) = env_flag("XFER_SOURCE_ERR") {
            a.source_err = v;
        }
        if let Some(v) = env_flag("XFER_RMA_EVENTS") {
            a.rma_events = v;
        }
        a
    }

    /// The effective settings.
    pub fn settings(&self) -> Vec<Setting> {
        vec![
            Setting {
                key: None,
                env: "XFER_RNDV_THRESHOLD",
                value: self.rndv_threshold.to_string(),
                doc: "bytes above which messages use rendezvous instead of eager",
            },
            Setting {
                key: None,
                env: "XFER_INJECT_SIZE",
                value: self.inject_size.to_string(),
                doc: "largest inject payload",
            },
            Setting {
                key: None,
                env: "XFER_SELECTIVE_COMPLETION",
                value: u8::from(self.selective_completion).to_string(),
                doc: "1: only operations that ask for a completion report success (errors always do)",
            },
            Setting {
                key: None,
                env: "XFER_SOURCE_ERR",
                value: u8::from(self.source_err).to_string(),
                doc: "1: a message from a sender not in the address vector completes with an error carrying its name",
            },
            Setting {
                key: None,
                env: "XFER_RMA_EVENTS",
                value: u8::from(self.rma_events).to_string(),
                doc: "1: RMA writes and reads peers apply to the endpoint are reported on its CQ (TCP only)",
            },
            Setting {
                key: None,
                env: "XFER_MAX_OUTSTANDING",
                value: self.max_outstanding.to_string(),
                doc: "operations with completions an endpoint keeps in flight before posting fails with EAGAIN (0: unbounded)",
            },
            Setting {
                key: None,
                env: "XFER_MAX_OUTSTANDING_PER_PEER",
                value: self.max_outstanding_per_peer.to_string(),
                doc: "sends and RMA with completions an endpoint keeps in flight to one peer before posting to it fails with EAGAIN (0: unbounded)",
            },
            Setting {
                key: None,
                env: "XFER_PROGRESS_TIMEOUT_MS",
                value: self.progress_timeout_ms.to_string(),
                doc: "operations waiting on a peer that made no progress (probed at half the time) for this long fail with ETIMEDOUT (0: off; TCP)",
            },
            Setting {
                key: None,
                env: "XFER_PEER_EVENTS",
                value: self.peer_events.to_string(),
                doc: "peer join/leave events an endpoint queues at most (0: off)",
            },
            Setting {
                key: None,
                env: "XFER_YIELD_AFTER_US",
                value: self.yield_after_us.to_string(),
                doc: "microseconds a wait on a peer (for room, for a send's or an engine-served RMA's answer, for a push's bytes) sees nothing move before progress yields the CPU to a peer sharing it (0: never)",
            },
            Setting {
                key: None,
                env: "XFER_JOB_KEY",
                value: if self.job_key.is_some() { "(set)" } else { "(unset)" }.into(),
                doc: "connecting peers must prove they hold this key (HMAC over a challenge) or are refused (TCP)",
            },
            Setting {
                key: None,
                env: "XFER_RX_MEMORY",
                value: self.rx_memory.to_string(),
                doc: "bytes of receive memory (credit in flight, unexpected messages, connections) peers may commit; past it connecting peers are refused",
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999999999999g"), None);
    }

    #[test]
    fn env_overrides_defaults() {
        std::env::set_var("XFER_RNDV_THRESHOLD", "16k");
        std::env::set_var("XFER_INJECT_SIZE", "not-a-number");
        std::env::set_var("XFER_SELECTIVE_COMPLETION", "Yes");
        let a = EndpointAttr::from_env();
        assert_eq!(a.rndv_threshold, 16 << 10);
        assert_eq!(a.inject_size, EndpointAttr::default().inject_size);
        assert!(a.selective_completion);
        assert!(a
            .settings()
            .iter()
            .any(|s| s.env == "XFER_SELECTIVE_COMPLETION" && s.value == "1"));
        std::env::set_var("XFER_SELECTIVE_COMPLETION", "maybe");
        assert!(
            !EndpointAttr::from_env().selective_completion,
            "not a yes/no: the default"
        );
        std::env::remove_var("XFER_RNDV_THRESHOLD");
        std::env::remove_var("XFER_INJECT_SIZE");
        std::env::remove_var("XFER_SELECTIVE_COMPLETION");
    }
}
