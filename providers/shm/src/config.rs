//! The settings of a port: defaults and their `XFER_SHM_*` variables.

use crate::layout;

/// Default bytes of each ring of a peer pair.
pub const DEFAULT_RING_BYTES: usize = 256 << 10;
/// Default most peers a port holds (connected, accepted or handshaking).
pub const DEFAULT_MAX_PEERS: usize = 256;

/// A port's settings. Memory per peer pair is one segment of
/// `8 KiB + 2 * ring_bytes` (shared by the two processes), so a port maps at
/// most `max_peers` of those.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmConfig {
    /// Bytes of each ring (each direction) of the segments this side
    /// creates, and the most it maps from a peer: a power of two from
    /// 4 KiB to 64 MiB (`XFER_SHM_RING_BYTES`, default 256 KiB; `k`, `M` suffixes). The
    /// largest frame is a quarter of the ring.
    pub ring_bytes: usize,
    /// Most peers at once (`XFER_SHM_MAX_PEERS`, default 256); connections
    /// beyond it are refused at once.
    pub max_peers: usize,
    /// Whether RMA may move data by cross-memory attach
    /// (`XFER_SHM_CMA`, default on; `0`/`off` forces the two-copy path
    /// through the ring, and makes this side refuse to serve by CMA).
    pub cma: bool,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            ring_bytes: DEFAULT_RING_BYTES,
            max_peers: DEFAULT_MAX_PEERS,
            cma: true,
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

impl ShmConfig {
    /// The defaults with the `XFER_SHM_*` variables that are set applied.
    pub fn from_env() -> Result<ShmConfig, BadSetting> {
        let mut c = ShmConfig::default();
        if let Some(v) = env_usize("XFER_SHM_RING_BYTES")? {
            c.ring_bytes = v;
        }
        if let Some(v) = env_usize("XFER_SHM_MAX_PEERS")? {
            c.max_peers = v;
        }
        if let Ok(v) = std::env::var("XFER_SHM_CMA") {
            c.cma = parse_bool(&v).ok_or_else(|| BadSetting(format!("XFER_SHM_CMA={v}: not 0/1/on/off")))?;
        }
        c.check()?;
        Ok(c)
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

fn env_usize(name: &str) -> Result<Option<usize>, BadSetting> {
    match std::env::var(name) {
        Ok(v) => parse_size(&v)
            .map(Some)
            .ok_or_else(|| BadSetting(format!("{name}={v}: not a size"))),
        Err(_) => Ok(None),
    }
}

/// A switch: `1`/`on`/`true`/`yes` or `0`/`off`/`false`/`no`.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// A number with an optional `k`, `M` or `G` suffix (powers of 1024), as
/// every xfer size setting takes.
fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (num, shift) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 10),
        b'm' | b'M' => (&v[..v.len() - 1], 20),
        b'g' | b'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    num.parse::<usize>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_checks() {
        assert_eq!(parse_size("256k"), Some(256 << 10));
        assert_eq!(parse_size(" 1M "), Some(1 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
        assert_eq!(parse_bool(" Off"), Some(false));
        assert_eq!(parse_bool("1"), Some(true));
        assert_eq!(parse_bool("2"), None);
        assert!(ShmConfig::default().check().is_ok());
        assert!(ShmConfig {
            ring_bytes: 5000,
            ..ShmConfig::default()
        }
        .check()
        .is_err());
        assert!(ShmConfig {
            ring_bytes: 2048,
            ..ShmConfig::default()
        }
        .check()
        .is_err());
        assert!(ShmConfig {
            max_peers: 0,
            ..ShmConfig::default()
        }
        .check()
        .is_err());
    }
}
