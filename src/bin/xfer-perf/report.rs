//! Results on stdout: an aligned table, or one JSON object per line.

use crate::plan::Phase;
use crate::stats::Latency;

pub struct Report {
    pub json: bool,
    pub provider: String,
    /// The client's domain threading mode (`single` unless `XFER_THREADING`).
    pub threading: xfer::Threading,
    header_for: Option<bool>,
}

impl Report {
    pub fn new(json: bool, provider: String, threading: xfer::Threading) -> Report {
        Report {
            json,
            provider,
            threading,
            header_for: None,
        }
    }

    /// Whether a table of this kind (latency or not) starts here: then the
    /// provider and threading line is printed, and the caller prints the
    /// column heads.
    fn heading(&mut self, latency: bool) -> bool {
        if self.header_for == Some(latency) {
            return false;
        }
        self.header_for = Some(latency);
        println!(
            "\n{} threading={} clock={}",
            self.provider,
            self.threading,
            crate::clock::name()
        );
        true
    }

    pub fn latency(&mut self, p: &Phase, l: &Latency) {
        if self.json {
            println!(
                "{{\"tool\":\"xfer-perf\",\"provider\":\"{}\",\"threading\":\"{}\",\"test\":\"{}\",\"size\":{},\"iters\":{},\"avg_us\":{:.3},\"p50_us\":{:.3},\"p99_us\":{:.3},\"max_us\":{:.3},\"clock\":\"{}\"}}",
                self.provider, self.threading, p.test.name(), p.size, p.iters, l.avg, l.p50, l.p99, l.max, crate::clock::name()
            );
            return;
        }
        if self.heading(true) {
            println!(
                "\n{:<15} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10}",
                "test", "bytes", "iters", "avg_us", "p50_us", "p99_us", "max_us"
            );
        }
        println!(
            "{:<15} {:>10} {:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
            p.test.name(),
            p.size,
            p.iters,
            l.avg,
            l.p50,
            l.p99,
            l.max
        );
    }

    pub fn bandwidth(&mut self, p: &Phase, secs: f64) {
        let mib_s = (p.size as f64 * p.iters as f64) / secs / (1 << 20) as f64;
        let rate = p.iters as f64 / secs;
        if self.json {
            println!(
                "{{\"tool\":\"xfer-perf\",\"provider\":\"{}\",\"threading\":\"{}\",\"test\":\"{}\",\"size\":{},\"iters\":{},\"window\":{},\"buffers\":\"{}\",\"mib_s\":{:.3},\"msg_rate\":{:.1}}}",
                self.provider, self.threading, p.test.name(), p.size, p.iters, p.window, p.buffers.name(), mib_s, rate
            );
            return;
        }
        if self.heading(false) {
            println!(
                "\n{:<15} {:>10} {:>8} {:>12} {:>12}",
                "test", "bytes", "iters", "MiB/s", "msg/s"
            );
        }
        println!(
            "{:<15} {:>10} {:>8} {:>12.1} {:>12.0}",
            p.test.name(),
            p.size,
            p.iters,
            mib_s,
            rate
        );
    }
}
