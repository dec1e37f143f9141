//! What to measure: the command line, and the phase descriptions the client
//! sends the server over the control channel.

use std::fmt;

use crate::clock::ClockKind;
use crate::hex::unhex;
use crate::pool::Buffers;

/// The benchmarks xfer-perf runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// Tagged ping-pong: half round-trip latency.
    TagLat,
    /// Tagged streaming: bandwidth and message rate.
    TagBw,
    /// Tagged message rate with a bound on sends in flight (`ucx_perftest -O`).
    TagRate,
    /// The same by `tinject`: no send completions, as `ucx_perftest`'s short
    /// sends, which complete in place.
    TagRateInject,
    /// Untagged ping-pong.
    MsgLat,
    /// Untagged streaming.
    MsgBw,
    /// Ping-pong of RMA writes with immediate data.
    PutLat,
    /// One RMA read at a time: its completion time, a full round trip.
    GetLat,
    /// Streaming RMA writes.
    PutBw,
    /// Streaming RMA reads.
    GetBw,
    /// One remote fetch-and-add at a time: its whole round trip.
    AtomicLat,
    /// One remote compare-and-swap at a time (each swapping the value the
    /// last one left for the next): its whole round trip.
    AtomicCasLat,
    /// Remote adds (no fetch) with a bound on those in flight: operations/s.
    AtomicRate,
    /// The same adds, each completed by the target's answer (delivery
    /// complete).
    AtomicRateDc,
}

impl Test {
    pub const ALL: [Test; 14] = [
        Test::TagLat,
        Test::TagBw,
        Test::TagRate,
        Test::TagRateInject,
        Test::MsgLat,
        Test::MsgBw,
        Test::PutLat,
        Test::GetLat,
        Test::PutBw,
        Test::GetBw,
        Test::AtomicLat,
        Test::AtomicCasLat,
        Test::AtomicRate,
        Test::AtomicRateDc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Test::TagLat => "tag_lat",
            Test::TagBw => "tag_bw",
            Test::TagRate => "tag_rate",
            Test::TagRateInject => "tag_rate_inject",
            Test::MsgLat => "msg_lat",
            Test::MsgBw => "msg_bw",
            Test::PutLat => "put_lat",
            Test::GetLat => "get_lat",
            Test::PutBw => "put_bw",
            Test::GetBw => "get_bw",
            Test::AtomicLat => "atomic_lat",
            Test::AtomicCasLat => "atomic_cas_lat",
            Test::AtomicRate => "atomic_rate",
            Test::AtomicRateDc => "atomic_rate_dc",
        }
    }

    pub fn parse(s: &str) -> Result<Test, String> {
        Test::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown test {s:?}"))
    }

    pub fn tagged(self) -> bool {
        matches!(self, Test::TagLat | Test::TagBw | Test::TagRate | Test::TagRateInject)
    }

    pub fn is_latency(self) -> bool {
        matches!(
            self,
            Test::TagLat | Test::MsgLat | Test::PutLat | Test::GetLat | Test::AtomicLat | Test::AtomicCasLat
        )
    }

    /// Remote atomics on one 64-bit element: one phase of 8 B whatever
    /// `--sizes` says.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            Test::AtomicLat | Test::AtomicCasLat | Test::AtomicRate | Test::AtomicRateDc
        )
    }

    pub fn is_rma(self) -> bool {
        matches!(self, Test::PutLat | Test::GetLat | Test::PutBw | Test::GetBw)
    }
}

/// One measurement: a test at one size. Sent from client to server as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    pub test: Test,
    pub size: usize,
    pub iters: usize,
    pub warmup: usize,
    /// Messages in flight per acknowledgement (bandwidth tests).
    pub window: usize,
    /// Where a streaming window's buffers come from.
    pub buffers: Buffers,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "phase {} {} {} {} {} {}",
            self.test.name(),
            self.size,
            self.iters,
            self.warmup,
            self.window,
            self.buffers.name()
        )
    }
}

impl Phase {
    /// Parses what [`Display`](fmt::Display) wrote; the bytes come from a
    /// peer, so every field is checked.
    pub fn parse(s: &str) -> Result<Phase, String> {
        let f: Vec<&str> = s.split(' ').collect();
        let [_, test, size, iters, warmup, window, buffers] = f[..] else {
            return Err(format!("malformed phase {s:?}"));
        };
        let num = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| format!("bad number {v:?} in phase {s:?}"))
        };
        let p = Phase {
            test: Test::parse(test)?,
            size: num(size)?,
            iters: num(iters)?,
            warmup: num(warmup)?,
            window: num(window)?,
            buffers: Buffers::parse(buffers)?,
        };
        if p.size > MAX_SIZE || p.window == 0 || p.iters == 0 {
            return Err(format!("phase out of range: {s:?}"));
        }
        Ok(p)
    }
}

/// Largest message size xfer-perf accepts.
pub const MAX_SIZE: usize = 64 << 20;

/// Where this process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client(Vec<u8>),
    Local,
}

/// The parsed command line.
#[derive(Clone, Debug)]
pub struct Options {
    pub tests: Vec<Test>,
    pub sizes: Vec<usize>,
    pub iters: Option<usize>,
    pub warmup: Option<usize>,
    pub window: usize,
    pub buffers: Buffers,
    pub json: bool,
    /// `--progress[=SECS]`: the interval of the progress line, forced on.
    pub progress: Option<f64>,
    /// `--counters`: each side prints its endpoint's counters at the end.
    pub counters: bool,
    /// `--clock`: what times latency samples.
    pub clock: ClockKind,
    pub role: Role,
}

pub const USAGE: &str = "usage: xfer-perf [options] [local | server | client NAME]

  local          both sides in this process (default)
  server         print `xfer-perf server: NAME`, serve one client, exit
  client NAME    run against the server whose name (hex) is NAME

options:
  --test LIST    tag_lat,tag_bw,tag_rate,tag_rate_inject,msg_lat,msg_bw,put_lat,get_lat,put_bw,
                 get_bw,atomic_lat,atomic_cas_lat,atomic_rate,atomic_rate_dc (default
                 tag_lat,tag_bw); get_lat is one read's round trip (as ib_read_lat),
                 atomic_lat one 64-bit fetch-and-add's (as ucp_fadd), atomic_cas_lat
                 one compare-and-swap's (as ucp_cswap), the other latencies half a round
                 trip; tag_rate keeps --window sends in flight and --window receives
                 posted, acknowledging only the last message (ucx_perftest -O);
                 tag_rate_inject sends the same by tinject (sizes up to the inject
                 size): no send completions, as ucx_perftest's short sends;
                 atomic_rate keeps --window 64-bit adds in flight (as ucp_add: each
                 completes when sent, a fetch at the end waits for them all);
                 atomic_rate_dc the same adds, each completed by the target's answer
  --sizes LIST   message sizes, e.g. 1,64,4k,1M (default 1 B to --max-size, powers of 2)
  --max-size N   largest default size (default 4M)
  --iters N      measured iterations per size (default: scaled by size)
  --warmup N     unmeasured iterations first (default: iters / 10)
  --window N     messages per acknowledgement in bandwidth tests (default 64; two
                 windows in flight); tag_rate: sends in flight
  --buffers M    bandwidth tests: `shared` (default): one buffer per side for every
                 message in flight, as ucx_perftest and ib_send_bw; `per-op`: a buffer
                 per message through the safe API (at most 64 MiB per side in flight)
  --json         one JSON object per result line instead of a table
  --progress[=S] a progress line on stderr every S seconds (default 1) once the run has
                 lasted 2 S; on by default when stderr is a terminal, unless --json
  --counters     each side prints its endpoint's counters on stderr when it is done
                 (`xfer-perf counters (server): name=value ...`)
  --clock C      what times latency samples: `auto` (default): the CPU's time-stamp
                 counter where its rate is invariant (as ucx_perftest and perftest),
                 else the system clock; `system`: the system clock (reported as
                 `clock` in each latency line)

Environment: every XFER_* setting (see xfer-info), e.g. XFER_PROVIDER, XFER_TCP_ADDR.";

impl Options {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            tests: vec![Test::TagLat, Test::TagBw],
            sizes: Vec::new(),
            iters: None,
            warmup: None,
            window: 64,
            buffers: Buffers::Shared,
            json: false,
            progress: None,
            counters: false,
            clock: ClockKind::Auto,
            role: Role::Local,
        };
        let mut max_size = 4 << 20;
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--test" => o.tests = value()?.split(',').map(Test::parse).collect::<Result<_, _>>()?,
                "--sizes" => o.sizes = value()?.split(',').map(parse_size).collect::<Result<_, _>>()?,
                "--max-size" => max_size = parse_size(&value()?)?,
                "--iters" => o.iters = Some(parse_count(&value()?)?),
                "--warmup" => o.warmup = Some(value()?.parse().map_err(|_| "bad --warmup")?),
                "--window" => o.window = parse_count(&value()?)?,
                "--buffers" => o.buffers = Buffers::parse(&value()?)?,
                "--json" => o.json = true,
                "--progress" => o.progress = Some(1.0),
                "--counters" => o.counters = true,
                "--clock" => o.clock = ClockKind::parse(&value()?)?,
                _ if a.starts_with("--progress=") => {
                    let v = &a["--progress=".len()..];
                    match v.parse::<f64>() {
                        Ok(s) if s > 0.0 && s < 1e6 => o.progress = Some(s),
                        _ => return Err(format!("bad --progress interval {v:?}")),
                    }
                }
                "-h" | "--help" => return Err(USAGE.into()),
                "local" => o.role = Role::Local,
                "server" => o.role = Role::Server,
                "client" => o.role = Role::Client(unhex(&value()?)?),
                other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
            }
        }
        if o.sizes.is_empty() {
            o.sizes = std::iter::successors(Some(1usize), |s| Some(s * 2))
                .take_while(|&s| s <= max_size)
                .collect();
        }
        if let Some(&s) = o.sizes.iter().find(|&&s| s > MAX_SIZE) {
            return Err(format!("size {s} is above the limit of {MAX_SIZE}"));
        }
        Ok(o)
    }

    /// The phases the client runs, in order.
    pub fn phases(&self) -> Vec<Phase> {
        let mut v = Vec::new();
        for &test in &self.tests {
            let atomic = [crate::atomic::SIZE];
            let sizes = if test.is_atomic() { &atomic[..] } else { &self.sizes };
            for &size in sizes {
                let iters = self.iters.unwrap_or_else(|| default_iters(test, size));
                let warmup = self.warmup.unwrap_or(iters / 10);
                // Bound the memory owned buffers pin to 64 MiB per side (two
                // windows in flight, bw::WINDOWS_IN_FLIGHT).
                let window = match self.buffers {
                    Buffers::Shared => self.window,
                    Buffers::PerOp => self.window.min(((32 << 20) / size.max(1)).max(1)),
                };
                v.push(Phase {
                    test,
                    size,
                    iters,
                    warmup,
                    window,
                    buffers: self.buffers,
                });
            }
        }
        v
    }
}

/// Enough iterations for a stable figure without spending minutes on large sizes.
fn default_iters(test: Test, size: usize) -> usize {
    let (bytes, cap, floor) = if test.is_latency() {
        (64 << 20, 10_000, 100)
    } else {
        (512 << 20, 100_000, 128)
    };
    (bytes / size.max(1)).clamp(floor, cap)
}

fn parse_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive count, got {s:?}")),
    }
}

/// `64`, `4k`, `1M`, `1G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<usize, String> {
    xfer_core::unstable::attr::parse_size(s)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| format!("bad size {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_round_trips_and_rejects_garbage() {
        let p = Phase {
            test: Test::TagBw,
            size: 4096,
            iters: 10,
            warmup: 1,
            window: 64,
            buffers: Buffers::PerOp,
        };
        assert_eq!(Phase::parse(&p.to_string()), Ok(p));
        assert_eq!(
            Phase::parse(
                &Phase {
                    buffers: Buffers::Shared,
                    ..p
                }
                .to_string()
            )
            .map(|p| p.buffers),
            Ok(Buffers::Shared)
        );
        assert!(Phase::parse("phase tag_bw 1 1 1 1 none").is_err());
        assert!(Phase::parse("phase tag_bw 1 2").is_err());
        assert!(Phase::parse("phase tag_bw x 1 1 1 shared").is_err());
        assert!(Phase::parse("phase nope 1 1 1 1 shared").is_err());
        assert!(Phase::parse(&format!("phase tag_lat {} 1 1 1 shared", MAX_SIZE + 1)).is_err());
    }

    #[test]
    fn atomic_tests_are_one_phase_of_eight_bytes() {
        let o = Options::parse(
            [
                "--test",
                "atomic_lat,atomic_cas_lat,atomic_rate,atomic_rate_dc,tag_lat",
                "--sizes",
                "1,64",
            ]
            .map(String::from),
        )
        .unwrap();
        let got: Vec<(Test, usize)> = o.phases().iter().map(|p| (p.test, p.size)).collect();
        assert_eq!(
            got,
            [
                (Test::AtomicLat, 8),
                (Test::AtomicCasLat, 8),
                (Test::AtomicRate, 8),
                (Test::AtomicRateDc, 8),
                (Test::TagLat, 1),
                (Test::TagLat, 64)
            ]
        );
        assert!(Test::AtomicLat.is_latency() && !Test::AtomicRate.is_latency());
    }

    #[test]
    fn options_defaults_and_sizes() {
        let o = Options::parse(["--max-size", "1k"].map(String::from)).unwrap();
        assert_eq!(o.sizes.len(), 11);
        assert_eq!(o.role, Role::Local);
        let o = Options::parse(["--sizes", "1,4k,1M", "client", "0aff"].map(String::from)).unwrap();
        assert_eq!(o.sizes, vec![1, 4096, 1 << 20]);
        assert_eq!(o.role, Role::Client(vec![0x0a, 0xff]));
        assert!(Options::parse(["client", "xyz"].map(String::from)).is_err());
        assert!(Options::parse(["--iters", "0"].map(String::from)).is_err());
        assert_eq!(
            Options::parse(["--progress"].map(String::from)).unwrap().progress,
            Some(1.0)
        );
        assert_eq!(
            Options::parse(["--progress=0.5"].map(String::from)).unwrap().progress,
            Some(0.5)
        );
        assert!(Options::parse(["--progress=0"].map(String::from)).is_err());
        assert_eq!(Options::parse(Vec::<String>::new()).unwrap().progress, None);
        assert!(Options::parse(["--counters"].map(String::from)).unwrap().counters);
        assert!(!Options::parse(Vec::<String>::new()).unwrap().counters);
    }
}
