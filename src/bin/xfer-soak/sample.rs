//! Resource samples of a process from /proc: resident memory and open
//! descriptors, the two things a soak must show flat.

/// One process's resources at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Resident set, bytes (`VmRSS`).
    pub rss: u64,
    /// Open file descriptors.
    pub fds: usize,
}

/// The resources of process `pid` now.
pub fn usage(pid: u32) -> Result<Usage, String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))?
        .count();
    Ok(Usage { rss: kb * 1024, fds })
}

/// Growth allowed between the baseline and the highest later sample before
/// memory counts as growing: 4 MiB or 5 %, whichever is more (allocator
/// noise on a steady workload, not a leak proportional to the operations).
pub fn rss_slack(base: u64) -> u64 {
    (4 << 20).max(base / 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_usage_is_read() {
        let u = usage(std::process::id()).expect("own usage");
        assert!(u.rss > 0 && u.fds >= 3, "{u:?}");
        assert!(usage(u32::MAX).is_err());
    }
}
