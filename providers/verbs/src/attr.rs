//! Tunables of the verbs provider, with their keys (`verbs.device`) in a
//! domain's [`Params`] and their `XFER_VERBS_*` environment variables (the
//! pattern of `xfer_core::unstable::attr`: defaults, `from_env`, and
//! [`Setting`] rows for `xfer-info`).

use xfer_core::knobs;
use xfer_core::unstable::attr::{env_value, param_value, unknown_key, Setting};
use xfer_core::unstable::error::Result;
use xfer_core::unstable::knob::{self as knob, Knob};
use xfer_core::unstable::params::Params;

/// Settings of the verbs provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsAttr {
    /// Device name (`mlx5_0`, `rxe0`); `None` takes the first device with an
    /// active port.
    pub device: Option<String>,
    /// Port number (1-based).
    pub port: u8,
    /// IPv4 address endpoints listen on (rdma_cm binds it, so it picks the
    /// device); `None` takes the IPv4 address of the port's RoCE v2 GID.
    /// Needed on InfiniBand (the IPoIB address) and iWARP.
    pub addr: Option<std::net::Ipv4Addr>,
    /// GID index for the QP's address vector; `None` keeps the one rdma_cm
    /// resolves from the IP address (the RoCE v2 IPv4-mapped GID on RoCE).
    pub gid_index: Option<u8>,
    /// A send is signaled at least every this many sends (clamped to the send
    /// queue depth); unsignaled slots are reclaimed by the next signaled one.
    pub signal_every: u32,
    /// Send queue depth of each RC QP (work requests).
    pub sq_depth: u32,
    /// Inline payload asked for when creating a QP; the device may grant less
    /// (the granted value is read back from the QP).
    pub max_inline: u32,
    /// Receive buffers in the domain's shared receive queue.
    pub srq_size: u32,
    /// The SRQ is refilled when fewer than this many receives are posted.
    pub srq_low_watermark: u32,
    /// Bytes per SRQ bounce buffer (the largest eager message).
    pub srq_buf_size: u32,
    /// RNR retries (7 = retry forever).
    pub rnr_retry: u8,
    /// Transport retries on timeout (at most 7, the default, as in UCX and
    /// librdmacm). Soft-RoCE (rxe) treats 7 as "retry forever" (like
    /// `rnr_retry`): there a responder that stalls (rxe does when a region
    /// is deregistered during an RDMA READ) hangs the operation instead of
    /// failing it after `(retry_cnt + 1) * 4.096 us * 2^timeout`; 6 bounds
    /// it, at the price of false failures when an emulated peer stalls for
    /// seconds under load.
    pub retry_cnt: u8,
    /// Local ACK timeout exponent: 4.096 µs * 2^timeout (0 = infinite).
    /// The default 14 (67 ms) recovers quickly from a dropped packet (rxe
    /// drops under load and relies on retransmission; 18, about 1 s, made
    /// an 8-peer flood crawl).
    pub timeout: u8,
    /// Minimum RNR NAK timer code sent to peers (IB spec table, 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Path MTU in bytes; 0 uses the port's active MTU. Capped by the port.
    pub path_mtu: u32,
    /// Entries of each completion queue.
    pub cq_size: u32,
    /// A connection not established and admitted after this many
    /// milliseconds fails (`ETIMEDOUT`), and the operations waiting for it
    /// with it. 0 (the default): the engine's handshake timeout, 10 s. Not
    /// too short on lossy links: connection set-up packets lost there are
    /// resent by the CM after seconds.
    pub connect_timeout_ms: u64,
    /// Keepalive interval in milliseconds (0: off). While operations wait
    /// on a peer (rendezvous sends for the receiver's FIN, receives
    /// directed at it, unsignaled work) and its connection has no signaled
    /// work request in flight, a signaled zero-length RDMA WRITE is posted
    /// this often: on a dead link it ends in "retry exceeded" and the
    /// waiting operations fail, instead of waiting forever. The peer's
    /// device answers it, not its process, so a slow peer is not affected.
    /// The same ticks query the local port: seen down on two in a row, it
    /// ends the connections with waiting work (`ENETDOWN`).
    pub keepalive_ms: u64,
    /// Messages (SENDs, each taking one of the receiver's SRQ buffers) a peer
    /// may have in flight to an endpoint before the endpoint says it has
    /// reposted their buffers (at least 16, the credit every connection
    /// starts with). With peers x (this + 5) <= `srq_size` the SRQ cannot run
    /// dry, so no RNR NAK is ever sent (docs/PROTOCOL-VERBS.md, "Credit").
    pub credit_msgs: u32,
    /// Eager bytes each peer may have in flight to an endpoint, unexpected
    /// ones included: what a receiver that posts no receives holds per peer
    /// (at most 128 KiB, the initial credit, until it consumes a message).
    /// Out of credit, a send goes by rendezvous and an inject fails with
    /// `Again`.
    pub eager_credit: u64,
    /// Largest RDMA READ one work request of a `verbs` rendezvous pull
    /// asks for (UCX's `RC_MAX_GET_ZCOPY`); a longer payload is read in
    /// chunks, as many in flight as the connection's initiator depth. 0:
    /// the port's `max_msg_sz`.
    pub read_max: u64,
}

impl Default for VerbsAttr {
    fn default() -> Self {
        VerbsAttr {
            device: None,
            port: 1,
            addr: None,
            gid_index: None,
            signal_every: 16,
            sq_depth: 256,
            max_inline: 256,
            srq_size: 1024,
            srq_low_watermark: 256,
            srq_buf_size: 8192,
            rnr_retry: 7,
            retry_cnt: 7,
            timeout: 14,
            min_rnr_timer: 12,
            path_mtu: 0,
            cq_size: 4096,
            connect_timeout_ms: 0,
            keepalive_ms: 1000,
            credit_msgs: 64,
            eager_credit: 4 << 20,
            read_max: 0,
        }
    }
}

/// The settings that are plain values, after `verbs.device`, `verbs.addr`
/// and `verbs.gid_index`.
const KNOBS: &[Knob<VerbsAttr>] = knobs! { VerbsAttr, "verbs":
    port "XFER_VERBS_PORT" "device port (1-based)";
    signal_every "XFER_VERBS_SIGNAL_EVERY" "signal a send completion at least every N sends";
    sq_depth "XFER_VERBS_SQ_DEPTH" "send queue depth per QP";
    max_inline "XFER_VERBS_MAX_INLINE" "inline bytes asked for per QP (the device may grant less)";
    srq_size "XFER_VERBS_SRQ_SIZE" "receive buffers in the shared receive queue";
    srq_low_watermark "XFER_VERBS_SRQ_LOW_WATERMARK"
        "refill the SRQ when fewer receives than this are posted";
    srq_buf_size "XFER_VERBS_SRQ_BUF_SIZE" "bytes per SRQ bounce buffer";
    rnr_retry "XFER_VERBS_RNR_RETRY" "RNR retries (7: infinite)";
    retry_cnt "XFER_VERBS_RETRY_CNT" "transport retries (max 7)";
    timeout "XFER_VERBS_TIMEOUT" "local ACK timeout exponent (4.096 us * 2^n)";
    min_rnr_timer "XFER_VERBS_MIN_RNR_TIMER" "minimum RNR NAK timer code advertised to peers";
    path_mtu "XFER_VERBS_PATH_MTU" "path MTU in bytes, capped by the port (0: the port's active MTU)";
    cq_size "XFER_VERBS_CQ_SIZE" "completion queue entries";
    connect_timeout_ms "XFER_VERBS_CONNECT_TIMEOUT_MS"
        "connection establishment timeout in ms (0: the engine's, 10 s)";
    keepalive_ms "XFER_VERBS_KEEPALIVE_MS"
        "keepalive probe interval in ms while operations wait on a peer (0: off)";
    credit_msgs "XFER_VERBS_CREDIT_MSGS"
        "messages a peer may have in flight to an endpoint's SRQ (at least 16)";
    eager_credit "XFER_VERBS_EAGER_CREDIT"
        "eager bytes a peer may have in flight to an endpoint, unexpected ones included (at least 128 KiB)";
    read_max "XFER_VERBS_READ_MAX"
        "largest RDMA READ of a verbs rendezvous pull; longer ones in chunks (0: the port's max_msg_sz)";
};

impl VerbsAttr {
    /// The prefix of this transport's keys in [`Params`].
    pub const PREFIX: &'static str = "verbs";

    /// Defaults overridden by the environment.
    pub fn from_env() -> Self {
        let mut a = Self::default();
        if let Ok(d) = std::env::var("XFER_VERBS_DEVICE") {
            a.device = Some(d).filter(|d| !d.is_empty());
        }
        if let Some(ip) = env_value::<String>("XFER_VERBS_ADDR") {
            match ip.trim() {
                "" | "auto" => a.addr = None,
                s => match s.parse() {
                    Ok(ip) => a.addr = Some(ip),
                    Err(_) => tracing::warn!(value = %ip, "ignoring unparsable XFER_VERBS_ADDR (an IPv4 address)"),
                },
            }
        }
        if let Some(g) = env_value::<String>("XFER_VERBS_GID_INDEX") {
            a.gid_index = match g.trim() {
                "" | "auto" => None,
                s => match s.parse() {
                    Ok(i) => Some(i),
                    Err(_) => {
                        tracing::warn!(value = %g, "ignoring unparsable XFER_VERBS_GID_INDEX");
                        a.gid_index
                    }
                },
            };
        }
        knob::apply_env(KNOBS, &mut a);
        a.clamp();
        a
    }

    /// Bounds the IB spec and the provider put on some settings.
    fn clamp(&mut self) {
        self.rnr_retry = self.rnr_retry.min(7);
        self.retry_cnt = self.retry_cnt.min(7);
        self.timeout = self.timeout.min(31);
        self.min_rnr_timer = self.min_rnr_timer.min(31);
        self.signal_every = self.signal_every.max(1);
    }

    /// Defaults overridden by the environment, then by the `verbs.*` keys
    /// of `params` (a domain's); an unknown `verbs.*` key or a value that
    /// does not parse is
    /// [`Error::InvalidSetting`](xfer_core::Error::InvalidSetting) naming
    /// it. Keys of other transports are left alone.
    pub fn from_params(params: &Params) -> Result<Self> {
        let mut a = Self::from_env();
        for (key, value) in params.under(Self::PREFIX) {
            a.set(key, value)?;
        }
        a.clamp();
        Ok(a)
    }

    /// Sets the setting `key` (`verbs.device`) from its text, as its
    /// environment variable takes it (`verbs.device` empty, `verbs.addr` and
    /// `verbs.gid_index` empty or `auto`: the automatic choice).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let auto = matches!(value.trim(), "" | "auto");
        match key {
            "verbs.device" => self.device = Some(value.trim().to_owned()).filter(|d| !d.is_empty()),
            "verbs.addr" if auto => self.addr = None,
            "verbs.addr" => self.addr = Some(param_value(key, value)?),
            "verbs.gid_index" if auto => self.gid_index = None,
            "verbs.gid_index" => self.gid_index = Some(param_value(key, value)?),
            _ => {
                return knob::set(KNOBS, self, key, value)
                    .unwrap_or_else(|| Err(unknown_key(key, &Self::default().settings())))
            }
        }
        Ok(())
    }

    /// The effective settings.
    pub fn settings(&self) -> Vec<Setting> {
        let row = |key, env, value: String, doc| Setting {
            key: Some(key),
            env,
            value,
            doc,
        };
        let own = [
            row(
                "verbs.device",
                "XFER_VERBS_DEVICE",
                self.device.clone().unwrap_or_else(|| "(first active)".into()),
                "verbs device to open",
            ),
            row(
                "verbs.addr",
                "XFER_VERBS_ADDR",
                self.addr.map_or_else(|| "auto".into(), |a| a.to_string()),
                "IPv4 address endpoints listen on (auto: the port's RoCE v2 GID address)",
            ),
            row(
                "verbs.gid_index",
                "XFER_VERBS_GID_INDEX",
                self.gid_index.map_or_else(|| "auto".into(), |g| g.to_string()),
                "GID index of the QPs' address vector (auto: the one rdma_cm resolves)",
            ),
        ];
        own.into_iter().chain(knob::rows(KNOBS, self)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VARS: [(&str, &str); 21] = [
        ("XFER_VERBS_DEVICE", "rxe7"),
        ("XFER_VERBS_PORT", "2"),
        ("XFER_VERBS_GID_INDEX", "3"),
        ("XFER_VERBS_ADDR", "10.11.0.9"),
        ("XFER_VERBS_SIGNAL_EVERY", "8"),
        ("XFER_VERBS_SQ_DEPTH", "64"),
        ("XFER_VERBS_MAX_INLINE", "128"),
        ("XFER_VERBS_SRQ_SIZE", "2k"),
        ("XFER_VERBS_SRQ_LOW_WATERMARK", "100"),
        ("XFER_VERBS_SRQ_BUF_SIZE", "4k"),
        ("XFER_VERBS_RNR_RETRY", "9"),
        ("XFER_VERBS_RETRY_CNT", "5"),
        ("XFER_VERBS_TIMEOUT", "18"),
        ("XFER_VERBS_MIN_RNR_TIMER", "1"),
        ("XFER_VERBS_PATH_MTU", "1024"),
        ("XFER_VERBS_CQ_SIZE", "512"),
        ("XFER_VERBS_CONNECT_TIMEOUT_MS", "2500"),
        ("XFER_VERBS_KEEPALIVE_MS", "250"),
        ("XFER_VERBS_CREDIT_MSGS", "32"),
        ("XFER_VERBS_EAGER_CREDIT", "256k"),
        ("XFER_VERBS_READ_MAX", "64k"),
    ];

    #[test]
    fn env_overrides_defaults() {
        for (k, v) in VARS {
            std::env::set_var(k, v);
        }
        let a = VerbsAttr::from_env();
        for (k, _) in VARS {
            std::env::remove_var(k);
        }
        assert_eq!(a.device.as_deref(), Some("rxe7"));
        assert_eq!(a.port, 2);
        assert_eq!(a.gid_index, Some(3));
        assert_eq!(a.addr, Some(std::net::Ipv4Addr::new(10, 11, 0, 9)));
        assert_eq!(a.signal_every, 8);
        assert_eq!(a.sq_depth, 64);
        assert_eq!(a.max_inline, 128);
        assert_eq!(a.srq_size, 2048);
        assert_eq!(a.srq_low_watermark, 100);
        assert_eq!(a.srq_buf_size, 4096);
        assert_eq!(a.rnr_retry, 7, "clamped to 7");
        assert_eq!(a.retry_cnt, 5);
        assert_eq!(a.timeout, 18);
        assert_eq!(a.min_rnr_timer, 1);
        assert_eq!(a.path_mtu, 1024);
        assert_eq!(a.cq_size, 512);
        assert_eq!(a.connect_timeout_ms, 2500);
        assert_eq!(a.keepalive_ms, 250);
        assert_eq!(a.credit_msgs, 32);
        assert_eq!(a.eager_credit, 256 << 10);
        assert_eq!(a.read_max, 64 << 10);
        let s = a.settings();
        assert_eq!(s.len(), 21);
        assert!(s.iter().any(|s| s.env == "XFER_VERBS_GID_INDEX" && s.value == "3"));
        assert!(s.iter().all(|s| s.env.starts_with("XFER_VERBS_")));
    }

    #[test]
    fn every_setting_has_a_key_that_params_set() {
        let mut p = Params::new();
        for row in VerbsAttr::default().settings() {
            let key = row.key.expect("every verbs setting has a key");
            assert_eq!(row.env, xfer_core::unstable::params::env_name(key), "{key}");
            let (_, value) = VARS.iter().find(|(env, _)| *env == row.env).expect("a value for it");
            p.set(key, *value);
        }
        p.set("tcp.iface", "eth0"); // another transport's: left alone
        let a = VerbsAttr::from_params(&p).expect("valid settings");
        assert_eq!(a.device.as_deref(), Some("rxe7"));
        assert_eq!(a.addr, Some(std::net::Ipv4Addr::new(10, 11, 0, 9)));
        assert_eq!((a.gid_index, a.srq_size, a.rnr_retry), (Some(3), 2048, 7));

        for (key, value) in [
            ("verbs.devcie", "rxe0"),
            ("verbs.addr", "10.0.0"),
            ("verbs.port", "one"),
        ] {
            let mut bad = Params::new();
            bad.set(key, value);
            let Err(xfer_core::unstable::error::Error::InvalidSetting(why)) = VerbsAttr::from_params(&bad) else {
                panic!("{key}={value} accepted");
            };
            assert!(why.contains(key), "{why}");
        }
    }

    #[test]
    fn defaults_are_sane() {
        let a = VerbsAttr::default();
        assert!(a.srq_low_watermark < a.srq_size);
        assert!(a.signal_every <= a.sq_depth);
        assert_eq!(a.gid_index, None);
        assert!(a.settings().iter().any(|s| s.value == "auto"));
    }
}
