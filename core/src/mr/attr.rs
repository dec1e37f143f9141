//! Attributes of the registration cache, with their `XFER_MR_CACHE_*`
//! environment variables (the pattern of [`crate::attr`]).

use std::fmt;
use std::str::FromStr;

use crate::attr::{env_value, Setting};

/// How the cache learns that cached memory was unmapped or returned to the OS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKind {
    /// userfaultfd unmap/remove/remap events (see [`super::unmap`]). Where
    /// userfaultfd is unavailable the cache falls back to no caching.
    Userfaultfd,
    /// No monitor: nothing is cached past its last release, since a stale
    /// registration could not be detected.
    Disabled,
}

impl FromStr for MonitorKind {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.trim().to_ascii_lowercase().as_str() {
            "userfaultfd" | "uffd" => Ok(MonitorKind::Userfaultfd),
            "disabled" | "none" | "off" => Ok(MonitorKind::Disabled),
            _ => Err(()),
        }
    }
}

impl fmt::Display for MonitorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MonitorKind::Userfaultfd => "userfaultfd",
            MonitorKind::Disabled => "disabled",
        })
    }
}

/// Limits and monitor of a registration cache ([`super::MrCache`]).
///
/// The limits count every live registration, in use or idle; only idle ones
/// can be evicted, so in-use registrations may push the cache past them
/// until they are released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MrCacheAttr {
    /// Registrations kept at most. 0 disables caching: every registration is
    /// deregistered at its last release.
    pub max_entries: usize,
    /// Registered bytes kept at most (page-aligned spans).
    pub max_bytes: usize,
    /// How unmapped memory is detected.
    pub monitor: MonitorKind,
}

impl Default for MrCacheAttr {
    /// 1024 entries and physical memory divided by the online CPUs
    /// (libfabric's `FI_MR_CACHE_MAX_COUNT` / `FI_MR_CACHE_MAX_SIZE`
    /// defaults), userfaultfd monitor.
    fn default() -> Self {
        MrCacheAttr {
            max_entries: 1024,
            max_bytes: default_max_bytes(),
            monitor: MonitorKind::Userfaultfd,
        }
    }
}

fn default_max_bytes() -> usize {
    // SAFETY: sysconf only reads system configuration.
    let (pages, page, cpus) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
        )
    };
    if pages <= 0 || page <= 0 {
        return 1 << 30;
    }
    let total = (pages as u128) * (page as u128) / (cpus.max(1) as u128);
    usize::try_from(total).unwrap_or(usize::MAX)
}

impl MrCacheAttr {
    /// Defaults overridden by the environment.
    pub fn from_env() -> Self {
        let mut a = Self::default();
        apply(&mut a.max_entries, "XFER_MR_CACHE_MAX_ENTRIES");
        apply(&mut a.max_bytes, "XFER_MR_CACHE_MAX_BYTES");
        apply(&mut a.monitor, "XFER_MR_CACHE_MONITOR");
        a
    }

    /// The effective settings.
    pub fn settings(&self) -> Vec<Setting> {
        vec![
            Setting {
                key: None,
                env: "XFER_MR_CACHE_MAX_ENTRIES",
                value: self.max_entries.to_string(),
                doc: "registrations the MR cache keeps (0: no caching)",
            },
            Setting {
                key: None,
                env: "XFER_MR_CACHE_MAX_BYTES",
                value: self.max_bytes.to_string(),
                doc: "registered bytes the MR cache keeps",
            },
            Setting {
                key: None,
                env: "XFER_MR_CACHE_MONITOR",
                value: self.monitor.to_string(),
                doc: "how freed memory is detected: userfaultfd or disabled (no caching)",
            },
        ]
    }
}

fn apply<T: FromStr>(field: &mut T, env: &str) {
    if let Some(v) = env_value(env) {
        *field = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_defaults() {
        std::env::set_var("XFER_MR_CACHE_MAX_ENTRIES", "77");
        std::env::set_var("XFER_MR_CACHE_MAX_BYTES", "64M");
        std::env::set_var("XFER_MR_CACHE_MONITOR", "none");
        let a = MrCacheAttr::from_env();
        std::env::remove_var("XFER_MR_CACHE_MAX_ENTRIES");
        std::env::remove_var("XFER_MR_CACHE_MAX_BYTES");
        std::env::remove_var("XFER_MR_CACHE_MONITOR");
        assert_eq!(a.max_entries, 77);
        assert_eq!(a.max_bytes, 64 << 20);
        assert_eq!(a.monitor, MonitorKind::Disabled);
        let s = a.settings();
        assert_eq!(s.len(), 3);
        assert!(s
            .iter()
            .any(|s| s.env == "XFER_MR_CACHE_MAX_BYTES" && s.value == (64 << 20).to_string()));
    }

    #[test]
    fn defaults_are_sane() {
        let a = MrCacheAttr::default();
        assert_eq!(a.max_entries, 1024);
        assert!(a.max_bytes >= 1 << 20);
        assert_eq!("uffd".parse::<MonitorKind>(), Ok(MonitorKind::Userfaultfd));
        assert!("bogus".parse::<MonitorKind>().is_err());
    }
}
