//! The benchmark's two measures, the same for any transport: small-call
//! latency (one call at a time) and call rate with many outstanding.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::{ctx, CalcClient};

/// `add` calls one at a time: the round-trip times' p50 and p99 in
/// microseconds, after `warmup` calls.
pub async fn latency(client: &CalcClient, warmup: usize, iters: usize) -> Result<(f64, f64), String> {
    let mut times = Vec::with_capacity(iters);
    for i in 0..(warmup + iters) as u64 {
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
    Ok(percentiles(&mut times))
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
