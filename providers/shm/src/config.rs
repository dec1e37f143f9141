//! The settings of a port: defaults and their `XFER_SHM_*` variables.

use xfer_core::unstable::attr::{param_flag, param_value, unknown_key};
use xfer_core::unstable::params::Params;
use xfer_core::{Error, Setting};

use crate::layout;

/// Default bytes of each ring of a peer pair.
pub const DEFAULT_RING_BYTES: usize = 256 << 10;
/// Default most peers a port holds (connected, accepted or handshaking).
pub const DEFAULT_MAX_PEERS: usize = 256;

/// Default eager credit granted to each peer (bytes).
pub const DEFAULT_EAGER_CREDIT: usize = 4 << 20;

/// Default smallest rendezvous payload pulled by cross-memory attach;
/// smaller ones are pushed through the ring.
pub const DEFAULT_CMA_MIN: usize = 256 << 10;

/// Default microseconds a rendezvous from `cma_min` waits for pushed
/// bytes before its receiver pulls the rest: longer than a running
/// sender's pauses between frames (30 made a running sender's pushes be
/// pulled now and then), short beside a 1 MiB pull (~70 µs at 15 GB/s is
/// the same order: a stalled push costs at most that).
pub const DEFAULT_PULL_AFTER_US: u64 = 100;

/// A port's settings (the shm transport's, keys `shm.*`). Memory per peer
/// pair is one segment of `8 KiB + 2 * ring_bytes` (shared by the two
/// processes), so a port maps at most `max_peers` of those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each ring (each direction) of the segments this side
    /// creates, and the most it maps from a peer: a power of two from
    /// 4 KiB to 64 MiB (`shm.ring_bytes`, `XFER_SHM_RING_BYTES`, default
    /// 256 KiB; `k`, `M` suffixes). The largest frame is a quarter of the ring.
    pub ring_bytes: usize,
    /// Most peers at once (`shm.max_peers`, `XFER_SHM_MAX_PEERS`, default
    /// 256); connections beyond it are refused at once.
    pub max_peers: usize,
    /// Whether payloads may move by cross-memory attach (`shm.cma`,
    /// `XFER_SHM_CMA`, default on; `0`/`off` forces the two-copy path
    /// through the ring for rendezvous and RMA, and makes this side refuse
    /// to serve by CMA).
    pub cma: bool,
    /// Smallest rendezvous payload the receiver pulls by cross-memory
    /// attach (`shm.cma_min`, `XFER_SHM_CMA_MIN`, default 256 KiB, the
    /// default ring's size): a smaller one is pushed through the ring by its
    /// sender, two copies that run in parallel on both processes' CPUs
    /// through cache-resident ring lines, which beats one `process_vm_readv`
    /// (its page pinning, one CPU) for a message the ring holds at once.
    /// `0` pulls every rendezvous. With `pull_after_us` set (the default),
    /// one from this size is pushed first and pulled only if the push
    /// stalls. RMA on a granted key is not affected.
    pub cma_min: usize,
    /// Microseconds a rendezvous of at least `cma_min` bytes may go without
    /// pushed bytes before its receiver pulls the rest (`shm.pull_after_us`,
    /// `XFER_SHM_PULL_AFTER_US`, default 100). Such a rendezvous is pushed
    /// through the ring first, as smaller ones are (two CPUs copying), and
    /// pulled only when its sender stops delivering (it shares the
    /// receiver's CPU or was descheduled); `0` pulls it at once.
    pub pull_after_us: u64,
    /// Eager credit an endpoint grants each peer in all: what one peer's
    /// eager messages may make it hold (`shm.eager_credit`,
    /// `XFER_SHM_EAGER_CREDIT`, default 4 MiB, at least the 128 KiB
    /// initial credit).
    pub eager_credit: usize,
    /// Whether shared memory serves peers at all (`shm.enabled`,
    /// `XFER_SHM_ENABLED`, default on). Off, an `shm+tcp` endpoint offers
    /// no shared-memory address and serves every peer over TCP; the `shm`
    /// provider refuses to open.
    pub enabled: bool,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            ring_bytes: DEFAULT_RING_BYTES,
            max_peers: DEFAULT_MAX_PEERS,
            cma: true,
            cma_min: DEFAULT_CMA_MIN,
            pull_after_us: DEFAULT_PULL_AFTER_US,
            eager_credit: DEFAULT_EAGER_CREDIT,
            enabled: true,
        }
    }
}

/// A setting that is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSetting(pub String);

impl std::fmt::Display for BadSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadSetting {}

impl From<BadSetting> for Error {
    fn from(e: BadSetting) -> Error {
        Error::InvalidSetting(e.0.into_boxed_str())
    }
}

impl ShmConfig {
    /// The prefix of this transport's keys in [`Params`].
    pub const PREFIX: &'static str = "shm";

    /// The defaults with the `XFER_SHM_*` variables that are set applied.
    pub fn from_env() -> Result<ShmConfig, BadSetting> {
        let mut c = ShmConfig::default();
        for key in KEYS {
            if let Ok(v) = std::env::var(env_name(key)) {
                c.set(key, &v)
                    .map_err(|e| BadSetting(format!("{}={v}: {e}", env_name(key))))?;
            }
        }
        c.check()?;
        Ok(c)
    }

    /// [`from_env`](Self::from_env), then the `shm.*` keys of `params`; an
    /// unknown key or a bad value is [`Error::InvalidSetting`] naming it.
    pub fn from_params(params: &Params) -> Result<ShmConfig, Error> {
        let mut c = Self::from_env()?;
        for (key, value) in params.under(Self::PREFIX) {
            c.set(key, value)?;
        }
        c.check()?;
        Ok(c)
    }

    /// Sets the setting `key` (`shm.ring_bytes`) from its text.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match key {
            "shm.ring_bytes" => self.ring_bytes = param_value(key, value)?,
            "shm.max_peers" => self.max_peers = param_value(key, value)?,
            "shm.cma" => self.cma = param_flag(key, value)?,
            "shm.cma_min" => self.cma_min = param_value(key, value)?,
            "shm.pull_after_us" => self.pull_after_us = param_value(key, value)?,
            "shm.eager_credit" => self.eager_credit = param_value(key, value)?,
            "shm.enabled" => self.enabled = param_flag(key, value)?,
            _ => return Err(unknown_key(key, &Self::default().settings())),
        }
        Ok(())
    }

    /// Every setting with its key, variable, value and meaning (`xfer-info`).
    pub fn settings(&self) -> Vec<Setting> {
        let row = |key: &'static str, value: String, doc: &'static str| Setting {
            key: Some(key),
            env: ENVS[KEYS.iter().position(|k| *k == key).unwrap_or(0)],
            value,
            doc,
        };
        vec![
            row(
                "shm.ring_bytes",
                self.ring_bytes.to_string(),
                "bytes of each ring of a peer pair (power of two, 4 KiB to 64 MiB); a frame is at most a quarter",
            ),
            row(
                "shm.max_peers",
                self.max_peers.to_string(),
                "most local peers an endpoint serves at once",
            ),
            row(
                "shm.cma",
                u8::from(self.cma).to_string(),
                "move large payloads by cross-memory attach (0: two copies through the ring)",
            ),
            row(
                "shm.cma_min",
                self.cma_min.to_string(),
                "smallest rendezvous the receiver may pull by cross-memory attach (first pushed, see shm.pull_after_us); smaller ones are pushed through the ring (0: all)",
            ),
            row(
                "shm.pull_after_us",
                self.pull_after_us.to_string(),
                "from shm.cma_min: push first, pull the rest after this many microseconds without pushed bytes (0: pull at once)",
            ),
            row(
                "shm.eager_credit",
                self.eager_credit.to_string(),
                "eager bytes each local peer may have in flight to an endpoint (at least 128 KiB)",
            ),
            row(
                "shm.enabled",
                u8::from(self.enabled).to_string(),
                "serve peers on this host over shared memory (0: shm+tcp carries every peer over TCP)",
            ),
        ]
    }

    /// Checks the values.
    pub fn check(&self) -> Result<(), BadSetting> {
        if !layout::valid_ring_bytes(self.ring_bytes, layout::MAX_RING_BYTES) {
            return Err(BadSetting(format!(
                "ring_bytes {} is not a power of two from {} to {}",
                self.ring_bytes,
                layout::MIN_RING_BYTES,
                layout::MAX_RING_BYTES
            )));
        }
        if self.max_peers == 0 {
            return Err(BadSetting("max_peers must be at least 1".into()));
        }
        Ok(())
    }
}

/// The keys, and their variables in the same order.
const KEYS: [&str; 7] = [
    "shm.ring_bytes",
    "shm.max_peers",
    "shm.cma",
    "shm.cma_min",
    "shm.pull_after_us",
    "shm.eager_credit",
    "shm.enabled",
];
const ENVS: [&str; 7] = [
    "XFER_SHM_RING_BYTES",
    "XFER_SHM_MAX_PEERS",
    "XFER_SHM_CMA",
    "XFER_SHM_CMA_MIN",
    "XFER_SHM_PULL_AFTER_US",
    "XFER_SHM_EAGER_CREDIT",
    "XFER_SHM_ENABLED",
];

fn env_name(key: &str) -> &'static str {
    ENVS[KEYS.iter().position(|k| *k == key).unwrap_or(0)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_check() {
        let mut c = ShmConfig::default();
        c.set("shm.ring_bytes", "1M").unwrap();
        assert_eq!(c.ring_bytes, 1 << 20);
        c.set("shm.cma", "Off").unwrap();
        assert!(!c.cma);
        c.set("shm.cma_min", "512k").unwrap();
        assert_eq!(c.cma_min, 512 << 10);
        c.set("shm.eager_credit", "256k").unwrap();
        assert_eq!(c.eager_credit, 256 << 10);
        c.set("shm.pull_after_us", "40").unwrap();
        assert_eq!(c.pull_after_us, 40);
        assert!(matches!(c.set("shm.cma", "2"), Err(Error::InvalidSetting(_))));
        let e = c.set("shm.rings", "1").unwrap_err();
        assert!(e.to_string().contains("shm.rings"), "{e}");
        assert!(ShmConfig::default().check().is_ok());
        for bad in [5000, 2048] {
            let c = ShmConfig {
                ring_bytes: bad,
                ..ShmConfig::default()
            };
            assert!(c.check().is_err(), "{bad}");
        }
        let c = ShmConfig {
            max_peers: 0,
            ..ShmConfig::default()
        };
        assert!(c.check().is_err());
        let mut p = Params::default();
        p.set("shm.max_peers", "0");
        assert!(ShmConfig::from_params(&p).is_err());
        let keys: Vec<_> = ShmConfig::default().settings().iter().filter_map(|s| s.key).collect();
        assert_eq!(keys, KEYS);
        let envs: Vec<_> = ShmConfig::default().settings().iter().map(|s| s.env).collect();
        assert_eq!(envs, ENVS);
    }
}
