//! The benchmark's two measures, the same for any transport: small-call
//! latency (one call at a time) and call rate with many outstanding.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::{ctx, CalcClient};

/// Round-trip times of calls made one at a time.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// Median, microseconds.
    pub p50: f64,
    /// 99th percentile, microseconds.
    pub p99: f64,
    /// The slowest call, microseconds.
    pub max: f64,
    /// Calls slower than [`SLOW`].
    pub slow: usize,
    /// CPU time per call of this process and of `peer` (microseconds), when
    /// the kernel reports it (`/proc/PID/task/*/schedstat`).
    pub cpu: Option<(f64, f64)>,
}

/// Nanoseconds process `pid` ran on a CPU so far, all its threads together
/// (the first field of each thread's `schedstat`). A thread running right
/// now is counted up to its last scheduler tick, so a short run of a
/// process that never sleeps (spinning) reads low.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// What [`Latency::slow`] counts: calls slower than the async layer's reactor
/// tick (50 ms), which only a wake-up lost to the tick would explain.
pub const SLOW: Duration = Duration::from_millis(40);

/// `add` calls one at a time, timed after `warmup` calls; the CPU time they
/// cost here and in the server process `peer`.
pub async fn latency(client: &CalcClient, peer: u32, warmup: usize, iters: usize) -> Result<Latency, String> {
    let mut times = Vec::with_capacity(iters);
    let both = || Some((cpu_ns(std::process::id())?, cpu_ns(peer)?));
    let mut cpu_start = None;
    for i in 0..(warmup + iters) as u64 {
        if i as usize == warmup {
            cpu_start = both();
        }
        let start = Instant::now();
        let got = client.add(ctx(), i, 1).await.map_err(|e| format!("add: {e}"))?;
        let took = start.elapsed();
        if got != i + 1 {
            return Err(format!("add({i}, 1) = {got}"));
        }
        if i as usize >= warmup {
            times.push(took);
        }
    }
    let per_call = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e3 / iters as f64;
    let cpu = cpu_start
        .zip(both())
        .map(|((me0, peer0), (me1, peer1))| (per_call(me0, me1), per_call(peer0, peer1)));
    let slow = times.iter().filter(|&&t| t > SLOW).count();
    let (p50, p99) = percentiles(&mut times);
    let max = times.last().map_or(0.0, |t| t.as_secs_f64() * 1e6);
    Ok(Latency {
        p50,
        p99,
        max,
        slow,
        cpu,
    })
}

/// p50 and p99 of `times`, in microseconds.
pub fn percentiles(times: &mut [Duration]) -> (f64, f64) {
    if times.is_empty() {
        return (0.0, 0.0);
    }
    times.sort_unstable();
    let at = |q: usize| times[(times.len() * q / 100).min(times.len() - 1)].as_secs_f64() * 1e6;
    (at(50), at(99))
}

/// `calls` `add` calls with `outstanding` in flight at once: calls per second.
pub async fn rate(client: &CalcClient, outstanding: usize, calls: usize) -> Result<f64, String> {
    let start = Instant::now();
    let mut results = futures::stream::iter(0..calls as u64)
        .map(|i| async move { (i, client.add(ctx(), i, 1).await) })
        .buffer_unordered(outstanding.max(1));
    while let Some((i, r)) = results.next().await {
        match r {
            Ok(got) if got == i + 1 => {}
            Ok(got) => return Err(format!("add({i}, 1) = {got}")),
            Err(e) => return Err(format!("add: {e}")),
        }
    }
    Ok(calls as f64 / start.elapsed().as_secs_f64())
}
