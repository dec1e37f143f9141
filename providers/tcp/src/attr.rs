//! The TCP transport's settings: each with its default, its key
//! (`tcp.iface`) in the domain's and endpoint's [`Params`] and its `XFER_TCP_*`
//! environment variable. Core carries the keys as text; this module parses
//! and checks them.

use xfer_core::knobs;
use xfer_core::unstable::attr::{unknown_key, Setting};
use xfer_core::unstable::error::Result;
use xfer_core::unstable::knob::{self as knobs, Knob};
use xfer_core::unstable::params::Params;

/// Settings of the TCP provider.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpAttr {
    /// Address to listen on: `1.2.3.4`, `1.2.3.4:PORT`, `::1`, `[::1]`,
    /// `[::1]:PORT`, a link-local IPv6 address with its zone (`fe80::1%eth0`,
    /// `[fe80::1%eth0]:PORT`); without a port, an ephemeral one. A wildcard
    /// IP needs a port (`0.0.0.0:PORT`, `[::]:PORT`): it listens on every
    /// interface, and the endpoint's name carries the address the automatic
    /// choice takes. `None`: the interface choice (`iface`, else automatic:
    /// the first interface that is up and neither loopback nor a container or
    /// VM bridge, by its IPv4 address, else by a global IPv6 one; else
    /// 127.0.0.1).
    pub addr: Option<String>,
    /// Interfaces to listen on, by name, in order of preference (as
    /// `FI_TCP_IFACE`, `UCX_NET_DEVICES`, Open MPI's `btl_tcp_if_include`):
    /// the first that is up with an address is used, whatever its kind.
    /// Empty: automatic. With `addr` set too, `addr` must be an address of
    /// one of them.
    pub iface: Vec<String>,
    /// Milliseconds a connection attempt may take before its operations
    /// fail: the TCP connect and the peer's answer to our Hello.
    pub connect_timeout_ms: u64,
    /// Milliseconds unacknowledged data may wait before the connection is
    /// declared dead (`TCP_USER_TIMEOUT`); 0 keeps the kernel default.
    pub user_timeout_ms: u64,
    /// Milliseconds of silence from a peer before a keepalive probe, and
    /// between probes (`SO_KEEPALIVE`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, in
    /// whole seconds rounded up); 0 turns keepalive off. With it, a peer that
    /// stops answering is declared dead even when we have nothing to send
    /// (waiting for a message or a clear-to-send): after `user_timeout_ms`
    /// but at least two probe periods of silence, or three unanswered probes
    /// when `user_timeout_ms` is 0.
    pub keepalive_ms: u64,
    /// Socket send and receive buffer sizes in bytes; 0 keeps the kernel's.
    pub sockbuf: usize,
    /// Send buffer in bytes of a connection that stays on this host
    /// (loopback, or to this host's own address), when `sockbuf` is 0: a
    /// small one keeps the bytes in flight in the cache (ARCHITECTURE.md
    /// decision 61); 0 keeps the kernel's autotuning.
    pub local_sndbuf: usize,
    /// Bytes of eager messages each peer may have in flight to this
    /// endpoint, unexpected ones included: what a slow receiver buffers per
    /// connection at most (payload plus 40 bytes a message). A sender out
    /// of credit sends by rendezvous (its buffer waits for the receive) and
    /// an inject fails with [`Error::Again`](crate::Error::Again). Raised to
    /// the protocol's initial credit (128 KiB) if below it.
    pub eager_credit: usize,
    /// Small eager frames (payload at most 4 KiB) posted in a burst, that
    /// is after another was written and before the endpoint's next progress
    /// call, wait in the connection's queue until that call, a blocking
    /// wait, or until this many are queued, and then go out together in one
    /// `sendmsg`; 0 writes every frame when it is posted. The first frame of
    /// a burst is always written at once (ARCHITECTURE.md decision 58).
    pub coalesce: usize,
}

impl Default for TcpAttr {
    fn default() -> Self {
        TcpAttr {
            addr: None,
            iface: Vec::new(),
            connect_timeout_ms: 10_000,
            user_timeout_ms: 30_000,
            keepalive_ms: 10_000,
            sockbuf: 0,
            local_sndbuf: 256 << 10,
            eager_credit: 4 << 20,
            coalesce: 32,
        }
    }
}

/// The names in a comma-separated interface list (`XFER_TCP_IFACE`,
/// `tcp_iface` of the C ABI), blanks around them and empty entries dropped.
pub fn iface_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The settings that are plain values, after `tcp.addr` and `tcp.iface`.
const KNOBS: &[Knob<TcpAttr>] = knobs! { TcpAttr, "tcp":
    connect_timeout_ms "XFER_TCP_CONNECT_TIMEOUT_MS"
        "connection attempt timeout (connect and hello handshake)";
    user_timeout_ms "XFER_TCP_USER_TIMEOUT_MS"
        "TCP_USER_TIMEOUT: unacknowledged data before a peer is declared dead";
    keepalive_ms "XFER_TCP_KEEPALIVE_MS"
        "keepalive probe period (0: off); a silent peer dies after the user timeout";
    sockbuf "XFER_TCP_SOCKBUF"
        "SO_SNDBUF/SO_RCVBUF (0: kernel default)";
    local_sndbuf "XFER_TCP_LOCAL_SNDBUF"
        "SO_SNDBUF of connections within this host when XFER_TCP_SOCKBUF is 0 (0: autotuning)";
    eager_credit "XFER_TCP_EAGER_CREDIT"
        "eager bytes a peer may have in flight to us (what a slow receiver buffers)";
    coalesce "XFER_TCP_COALESCE"
        "small sends posted in a burst wait for the next poll or this many, then share a sendmsg (0: off)";
};

impl TcpAttr {
    /// The prefix of this transport's keys in [`Params`].
    pub const PREFIX: &'static str = "tcp";

    /// Defaults overridden by the environment, then by the `tcp.*` keys of
    /// `params` (an endpoint's over its domain's); an unknown `tcp.*` key or
    /// a value that does not parse is
    /// [`Error::InvalidSetting`](xfer_core::Error::InvalidSetting) naming
    /// it. Keys of other transports are left alone.
    pub fn from_params(params: &Params) -> Result<Self> {
        let mut a = Self::from_env();
        for (key, value) in params.under(Self::PREFIX) {
            a.set(key, value)?;
        }
        Ok(a)
    }

    /// Sets the setting `key` (`tcp.iface`) from its text, as its
    /// environment variable takes it; `tcp.addr` and `tcp.iface` empty mean
    /// unset.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        match key {
            "tcp.addr" => self.addr = Some(value.trim().to_owned()).filter(|s| !s.is_empty()),
            "tcp.iface" => self.iface = iface_list(value),
            _ => {
                return knobs::set(KNOBS, self, key, value)
                    .unwrap_or_else(|| Err(unknown_key(key, &Self::default().settings())))
            }
        }
        Ok(())
    }

    /// Defaults overridden by the environment.
    pub fn from_env() -> Self {
        let mut a = TcpAttr {
            addr: std::env::var("XFER_TCP_ADDR").ok().filter(|s| !s.is_empty()),
            iface: std::env::var("XFER_TCP_IFACE")
                .map(|s| iface_list(&s))
                .unwrap_or_default(),
            ..Self::default()
        };
        knobs::apply_env(KNOBS, &mut a);
        a
    }

    /// The effective settings, with their keys.
    pub fn settings(&self) -> Vec<Setting> {
        let iface = match self.iface.is_empty() {
            true => "(automatic)".into(),
            false => self.iface.join(","),
        };
        let own = [
            Setting {
                key: Some("tcp.addr"),
                env: "XFER_TCP_ADDR",
                value: self.addr.clone().unwrap_or_else(|| "(interface choice)".into()),
                doc: "IP, IP:PORT, [IPv6]:PORT or fe80::1%eth0 the TCP endpoint listens on",
            },
            Setting {
                key: Some("tcp.iface"),
                env: "XFER_TCP_IFACE",
                value: iface,
                doc:
                    "interfaces to listen on, first usable wins (automatic: first up, not loopback or container bridge)",
            },
        ];
        own.into_iter().chain(knobs::rows(KNOBS, self)).collect()
    }
}

#[cfg(test)]
mod tests {
    use xfer_core::unstable::error::Error;
    use xfer_core::unstable::params::env_name;

    use super::*;

    #[test]
    fn interface_lists_split_on_commas() {
        assert_eq!(iface_list("eth0"), ["eth0"]);
        assert_eq!(iface_list(" ib0 , eth1,,"), ["ib0", "eth1"]);
        assert!(iface_list(" , ").is_empty());
    }

    #[test]
    fn every_setting_has_a_key_and_its_environment_variable() {
        let rows = TcpAttr::default().settings();
        for row in &rows {
            let key = row.key.expect("every TCP setting has a key");
            assert!(key.starts_with("tcp."), "{key}");
            assert_eq!(row.env, env_name(key), "{key}");
            // Every key listed can be set.
            let value = if key == "tcp.addr" { "127.0.0.1" } else { "7" };
            TcpAttr::default()
                .set(key, value)
                .unwrap_or_else(|e| panic!("{key}: {e}"));
        }
        assert_eq!(rows.len(), 9);
    }

    #[test]
    fn params_set_typed_settings_and_bad_ones_name_the_key() {
        let mut p = Params::new();
        p.set("tcp.iface", "ib0, eth1")
            .set("tcp.coalesce", "0")
            .set("tcp.sockbuf", "64k");
        p.set("verbs.device", "mlx5_0"); // another transport's: left alone
        let a = TcpAttr::from_params(&p).expect("valid settings");
        assert_eq!(a.iface, ["ib0", "eth1"]);
        assert_eq!(a.coalesce, 0);
        assert_eq!(a.sockbuf, 64 << 10);

        p.set("tcp.ifcae", "eth0");
        let Err(Error::InvalidSetting(why)) = TcpAttr::from_params(&p) else {
            panic!("an unknown tcp key was accepted");
        };
        assert!(why.contains("tcp.ifcae") && why.contains("tcp.iface"), "{why}");
        p.remove("tcp.ifcae");
        p.set("tcp.coalesce", "lots");
        let Err(Error::InvalidSetting(why)) = TcpAttr::from_params(&p) else {
            panic!("a bad value was accepted");
        };
        assert!(why.contains("tcp.coalesce") && why.contains("lots"), "{why}");
    }
}
