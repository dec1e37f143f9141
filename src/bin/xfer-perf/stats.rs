//! Latency samples and the figures drawn from them.

/// Summary of a latency run, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    pub avg: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// Summarises `samples` (sorted in place); `None` when there are none.
pub fn latency(samples: &mut [f64]) -> Option<Latency> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let at = |q: usize| samples[((n * q) / 100).min(n - 1)];
    Some(Latency {
        avg: samples.iter().sum::<f64>() / n as f64,
        p50: at(50),
        p99: at(99),
        max: samples[n - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut s: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let l = latency(&mut s).unwrap();
        assert_eq!((l.p50, l.p99, l.max, l.avg), (51.0, 100.0, 100.0, 50.5));
        assert!(latency(&mut []).is_none());
    }
}
