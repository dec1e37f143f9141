//! The shipped programs run: `xfer-info` reports the providers (verbs, with
//! why not when this machine has no usable device, then TCP), and the
//! `pingpong` example completes a ping-pong between two real processes on
//! loopback. Every child is killed if the test fails or its deadline passes,
//! so nothing hangs.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the ping-pong itself may take, once the example is built.
const DEADLINE: Duration = Duration::from_secs(60);
/// How long building the example may take (a cold build on a busy machine).
const BUILD_DEADLINE: Duration = Duration::from_secs(600);

/// A child process whose output is read by threads; killed when dropped.
struct Proc {
    what: String,
    child: Child,
    stdout: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Proc {
    fn spawn(what: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .env("XFER_TCP_ADDR", "127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
        let (tx, stdout) = mpsc::channel();
        let out = child.stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().expect("stderr is piped");
        let stderr = Some(std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        }));
        Proc {
            what: what.to_string(),
            child,
            stdout,
            stderr,
        }
    }

    /// `cargo <args>` in this package, with the environment of the test
    /// (so the same target directory).
    fn cargo(what: &str, args: &[&str]) -> Proc {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
        Proc::spawn(what, cmd)
    }

    /// `cargo run --quiet --example pingpong -- <args>`.
    fn pingpong(what: &str, args: &[&str]) -> Proc {
        let mut all = vec!["run", "--quiet", "--example", "pingpong", "--"];
        all.extend_from_slice(args);
        Proc::cargo(what, &all)
    }

    /// The next line of standard output; fails the test at `deadline`.
    fn line(&mut self, deadline: Instant) -> String {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.stdout.recv_timeout(left) {
            Ok(line) => line,
            Err(e) => self.fail(&format!("no output line ({e:?})")),
        }
    }

    /// Waits for the exit; returns the status, the rest of standard output
    /// and all of standard error. Fails the test at `deadline`.
    fn finish(mut self, deadline: Instant) -> (ExitStatus, Vec<String>, String) {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => self.fail("still running at the deadline"),
                Err(e) => panic!("{}: waiting: {e}", self.what),
            }
        };
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("{}: standard output never closed", self.what),
            }
        }
        (status, lines, self.stderr())
    }

    /// Kills the child and fails the test, showing its standard error.
    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let err = self.stderr();
        panic!("{}: {why}; stderr:\n{err}", self.what)
    }

    /// All of standard error; call once the child has exited or been killed.
    fn stderr(&mut self) -> String {
        let _ = self.child.wait();
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn xfer_info_lists_tcp() {
    let deadline = Instant::now() + DEADLINE;
    let text = Proc::spawn("xfer-info", Command::new(env!("CARGO_BIN_EXE_xfer-info")));
    let (status, lines, err) = text.finish(deadline);
    assert!(
        status.success(),
        "xfer-info failed: {status}\n{}\n{err}",
        lines.join("\n")
    );
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("tcp") && l.contains("available")),
        "no tcp provider in:\n{}",
        lines.join("\n")
    );
    let verbs = verbs_available(&lines);
    let picks = if verbs == Some(true) { "shm+verbs" } else { "shm+tcp" };
    assert!(
        lines.iter().any(|l| l == &format!("open_default() picks: {picks}")),
        "{}",
        lines.join("\n")
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("XFER_TCP_ADDR") && l.contains("127.0.0.1")));

    // The interfaces, with the one TCP listens on: loopback, holding
    // XFER_TCP_ADDR (which Proc::spawn sets), and listed.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.env("XFER_TCP_IFACE", "lo");
    let (status, lines, err) = Proc::spawn("xfer-info (XFER_TCP_IFACE=lo)", cmd).finish(deadline);
    assert!(status.success(), "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l == "tcp listens on: 127.0.0.1:0 on lo (XFER_TCP_ADDR)"),
        "{}",
        lines.join("\n")
    );
    let lo: Vec<&str> = lines
        .iter()
        .find(|l| l.trim_start().starts_with("lo "))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        lo.get(..4),
        Some(&["lo", "up", "loopback", "127.0.0.1/8"][..]),
        "{}",
        lines.join("\n")
    );
    assert_eq!(lo.last(), Some(&"used"), "{}", lines.join("\n"));

    // Settings show their effective value next to the default.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.env("XFER_MAX_OUTSTANDING_PER_PEER", "8");
    let (status, lines, err) = Proc::spawn("xfer-info (per-peer bound set)", cmd).finish(deadline);
    assert!(status.success(), "{err}");
    let row: Vec<&str> = lines
        .iter()
        .find(|l| l.trim_start().starts_with("XFER_MAX_OUTSTANDING_PER_PEER "))
        .map(|l| l.split_whitespace().take(3).collect())
        .unwrap_or_default();
    assert_eq!(row, ["XFER_MAX_OUTSTANDING_PER_PEER", "8", "0"], "{}", lines.join("\n"));
    // Every setting of every transport, with its variable and its key.
    for setting in xfer::default_transport_settings() {
        let key = setting.key.expect("a transport setting has a key");
        assert!(
            lines.iter().any(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                cells.first() == Some(&setting.env) && cells.contains(&key)
            }),
            "no row for {} ({key}) in:\n{}",
            setting.env,
            lines.join("\n")
        );
    }

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.arg("--json");
    let (status, lines, err) = Proc::spawn("xfer-info --json", cmd).finish(deadline);
    assert!(status.success(), "xfer-info --json failed: {status}\n{err}");
    let json = lines.join("\n");
    assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
    assert!(json.contains(r#""name": "tcp", "available": true"#), "{json}");
    assert!(json.contains(&format!(r#""chosen": "{picks}""#)), "{json}");
    assert!(json.contains(r#""error": null"#), "{json}");
    assert!(
        json.contains(r#"{"env": "XFER_TCP_IFACE", "key": "tcp.iface", "value": "#),
        "{json}"
    );
    assert!(
        json.contains(r#"{"env": "XFER_CQ_SIZE", "key": null, "value": "#),
        "{json}"
    );

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.arg("--no-such-flag");
    let (status, _, err) = Proc::spawn("xfer-info --no-such-flag", cmd).finish(deadline);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("usage"), "{err}");
}

/// `xfer-info --peer NAME` says which transport an `shm+tcp` endpoint here
/// would serve that peer over, and why: shared memory for a real endpoint
/// of this host, TCP for one whose host identity differs, one that offers no
/// shared memory, or when this side has it off.
#[test]
fn xfer_info_says_which_transport_serves_a_peer() {
    let deadline = Instant::now() + DEADLINE;
    let mut attr = xfer::DomainAttr::with_provider("shm+tcp");
    attr.params.set("tcp.addr", "127.0.0.1");
    let domain = xfer::open(&attr).expect("open shm+tcp");
    let cq = domain.cq(&xfer::CqAttr::default()).expect("cq");
    let av = domain.av().expect("av");
    let ep = domain
        .endpoint(&cq, &av, &xfer::EndpointAttr::default())
        .expect("endpoint");
    let name = ep.name().as_bytes().to_vec();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let run = |what: &str, arg: &str, env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
        cmd.args(["--peer", arg]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc::spawn(what, cmd).finish(deadline)
    };
    let said = |what: &str, arg: &str, env: &[(&str, &str)]| {
        let (status, lines, err) = run(what, arg, env);
        assert!(status.success(), "{what}: {status}\n{err}");
        lines.join("\n")
    };
    assert_eq!(
        said("same host", &hex(&name), &[]),
        "shm: same host, same user and namespaces"
    );
    assert_eq!(
        said("shm off here", &hex(&name), &[("XFER_SHM_ENABLED", "0")]),
        "tcp: shared memory is off on this endpoint"
    );
    let mut other = name.clone();
    other[1] ^= 0xff;
    assert_eq!(said("another host", &hex(&other), &[]), "tcp: different host identity");
    // The same name without its shm address (length 0, 14 bytes less).
    let bare = [&name[..9], &[0], &name[10 + 14..]].concat();
    assert_eq!(
        said("no shm offered", &hex(&bare), &[]),
        "tcp: the peer offers no shared-memory address"
    );
    let (status, _, err) = run("a bad name", &hex(&name[..12]), &[]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not an shm+tcp endpoint name"), "{err}");
}

/// Whether `xfer-info`'s provider list says verbs is available; `None` when
/// it is not listed (built without the `verbs` feature).
fn verbs_available(lines: &[String]) -> Option<bool> {
    let at = |name: &str| {
        lines
            .iter()
            .position(|l| l.trim_start().starts_with(&format!("{name} ")))
    };
    let verbs = at("verbs")?;
    assert!(
        at("tcp").is_some_and(|tcp| verbs < tcp),
        "verbs is not listed before tcp:\n{}",
        lines.join("\n")
    );
    Some(lines[verbs].split_whitespace().nth(1) == Some("available"))
}

#[test]
fn xfer_info_says_why_verbs_is_unavailable() {
    let deadline = Instant::now() + DEADLINE;
    let (status, lines, err) = Proc::spawn("xfer-info", Command::new(env!("CARGO_BIN_EXE_xfer-info"))).finish(deadline);
    assert!(status.success(), "xfer-info failed: {status}\n{err}");
    match verbs_available(&lines) {
        None => {
            if cfg!(feature = "verbs") {
                panic!("verbs not listed:\n{}", lines.join("\n"));
            }
            return;
        }
        Some(true) => {
            eprintln!("this machine has a usable verbs device: nothing to check");
            return;
        }
        Some(false) => {}
    }
    // `verbs  unavailable  <reason>`, and the device section repeats the
    // probe's reason.
    let line = lines.iter().find(|l| l.trim_start().starts_with("verbs ")).unwrap();
    let reason = line.split_once("unavailable").map_or("", |(_, r)| r.trim());
    assert!(!reason.is_empty(), "no reason in {line:?}");
    // The choice report repeats it as the reason verbs was not chosen.
    let verdict = format!("unavailable: {reason}");
    assert!(
        lines.iter().any(|l| l
            .trim_start()
            .strip_prefix("verbs ")
            .is_some_and(|r| r.trim_start() == verdict)),
        "no verdict on verbs in:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.starts_with("verbs devices:")),
        "no verbs devices section in:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains("XFER_VERBS_ADDR")),
        "no verbs settings in:\n{}",
        lines.join("\n")
    );

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.arg("--json");
    let (status, lines, err) = Proc::spawn("xfer-info --json", cmd).finish(deadline);
    assert!(status.success(), "xfer-info --json failed: {status}\n{err}");
    let json = lines.join("\n");
    assert!(
        json.contains(r#""name": "verbs", "available": false, "detail": ""#),
        "{json}"
    );
    assert!(
        !json.contains(r#""name": "verbs", "available": false, "detail": """#),
        "{json}"
    );
    assert!(json.contains(r#""chosen": "shm+tcp""#), "{json}");
    assert!(
        json.contains(r#""why": [{"name": "shm+verbs", "verdict": "unavailable: "#),
        "{json}"
    );
    assert!(
        json.contains(r#"{"name": "verbs", "verdict": "unavailable: "#),
        "{json}"
    );
    assert!(json.contains(r#""verbs": {"devices": ["#), "{json}");

    // Forcing tcp: verbs was not requested.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.env("XFER_PROVIDER", "tcp");
    let (status, lines, err) = Proc::spawn("XFER_PROVIDER=tcp xfer-info", cmd).finish(deadline);
    assert!(status.success(), "{err}");
    assert!(
        lines.iter().any(|l| l
            .trim_start()
            .strip_prefix("verbs ")
            .is_some_and(|r| r.trim_start() == "not requested (XFER_PROVIDER=tcp)")),
        "{}",
        lines.join("\n")
    );
    assert!(json.contains(r#""env": "XFER_VERBS_DEVICE""#), "{json}");

    // Forcing verbs where it cannot run is an error, with the reason.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
    cmd.env("XFER_PROVIDER", "verbs");
    let (status, lines, err) = Proc::spawn("XFER_PROVIDER=verbs xfer-info", cmd).finish(deadline);
    assert_eq!(status.code(), Some(1), "{}\n{err}", lines.join("\n"));
    assert!(
        lines.iter().any(|l| l == "open_default() picks: nothing"),
        "{}",
        lines.join("\n")
    );
    assert!(err.contains("xfer-info: error: opening a domain:"), "{err}");
}

#[test]
fn pingpong_between_two_processes() {
    // Build first, with its own deadline, so compile time does not count
    // against the ping-pong's.
    let build = Proc::cargo("building pingpong", &["build", "--quiet", "--example", "pingpong"]);
    let (status, _, err) = build.finish(Instant::now() + BUILD_DEADLINE);
    assert!(
        status.success(),
        "building the pingpong example failed: {status}\n{err}"
    );

    let deadline = Instant::now() + DEADLINE;
    let mut server = Proc::pingpong("pingpong server", &["server"]);
    let first = server.line(deadline);
    let name = first
        .strip_prefix("pingpong server: ")
        .unwrap_or_else(|| panic!("unexpected first server line {first:?}"))
        .to_string();

    let client = Proc::pingpong("pingpong client", &["client", &name, "--iters", "100", "--size", "100"]);
    let (status, lines, err) = client.finish(deadline);
    assert!(status.success(), "client failed: {status}\n{}\n{err}", lines.join("\n"));
    for mode in ["msg", "tagged"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("pingpong client: {mode} ")) && l.ends_with(" us")),
            "no {mode} latency line in:\n{}",
            lines.join("\n")
        );
    }

    let (status, lines, err) = server.finish(deadline);
    assert!(status.success(), "server failed: {status}\n{}\n{err}", lines.join("\n"));
    assert_eq!(
        lines.last().map(String::as_str),
        Some("pingpong server: done, echoed 200 messages"),
        "{}",
        lines.join("\n")
    );
}

#[test]
fn pingpong_client_reports_bad_input() {
    let deadline = Instant::now() + BUILD_DEADLINE;
    let client = Proc::pingpong("pingpong client", &["client", "not-hex"]);
    let (status, _, err) = client.finish(deadline);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("pingpong: error:"), "{err}");
}

/// The number after `"key":` in a JSON line xfer-perf printed.
fn json_number(line: &str, key: &str) -> f64 {
    let at = line
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {line}"));
    let rest = &line[at + key.len() + 3..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end]
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not a number in {line}"))
}

#[test]
fn xfer_perf_between_two_processes() {
    let opts = "--json --test tag_lat,tag_bw,tag_rate,msg_lat,msg_bw,put_lat,get_lat,put_bw,get_bw \
                --sizes 1,64k,1M --iters 40";
    let lines = xfer_perf_pair(None, opts);
    for test in [
        "tag_lat", "tag_bw", "tag_rate", "msg_lat", "msg_bw", "put_lat", "get_lat", "put_bw", "get_bw",
    ] {
        for size in [1, 65536, 1 << 20] {
            let line = result_line(&lines, "default", test, size);
            let figure = if test.ends_with("lat") { "p50_us" } else { "mib_s" };
            assert!(json_number(line, figure) > 0.0, "{line}");
            assert_eq!(json_number(line, "iters"), 40.0, "{line}");
        }
    }
}

/// `atomic_lat` (each fetch-and-add must fetch the count so far),
/// `atomic_cas_lat` (each compare-and-swap too, swapping it for the next) and
/// `atomic_rate` between two processes over the providers that apply
/// atomics (every one on this host: the RDM engine's targets apply them);
/// the server checks the element counts every operation.
#[test]
fn xfer_perf_atomics_between_two_processes() {
    for provider in ["shm", "tcp"] {
        let opts = "--json --test atomic_lat,atomic_cas_lat,atomic_rate --iters 300";
        let lines = xfer_perf_pair(Some(provider), opts);
        for (test, figure) in [
            ("atomic_lat", "p50_us"),
            ("atomic_cas_lat", "p50_us"),
            ("atomic_rate", "msg_rate"),
        ] {
            let line = result_line(&lines, provider, test, 8);
            assert!(json_number(line, figure) > 0.0, "{line}");
            assert_eq!(json_number(line, "iters"), 300.0, "{line}");
        }
    }
}

/// `tag_rate_inject` (sends by `tinject`, no send completions) between two
/// processes over shm and tcp: every message reaches the server (it
/// acknowledges only the last, after counting them); a size over the
/// endpoint's inject size is refused with a clear error.
#[test]
fn xfer_perf_rate_by_inject_between_two_processes() {
    for provider in ["shm", "tcp"] {
        let opts = "--json --test tag_rate_inject --sizes 1,64 --iters 20000";
        let lines = xfer_perf_pair(Some(provider), opts);
        for size in [1, 64] {
            let line = result_line(&lines, provider, "tag_rate_inject", size);
            assert!(json_number(line, "msg_rate") > 0.0, "{line}");
            assert_eq!(json_number(line, "iters"), 20000.0, "{line}");
        }
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-perf"));
    cmd.args(["--test", "tag_rate_inject", "--sizes", "1M", "--iters", "10"]);
    let (status, _, err) = Proc::spawn("xfer-perf tag_rate_inject 1M", cmd).finish(Instant::now() + DEADLINE);
    assert!(!status.success() && err.contains("inject_size"), "{status}: {err}");
}

/// Runs an xfer-perf server and client with `opts` (space-separated) over
/// `provider` (`None`: the environment's); the client's output lines, both
/// having exited 0.
fn xfer_perf_pair(provider: Option<&str>, opts: &str) -> Vec<String> {
    let deadline = Instant::now() + DEADLINE;
    let opts: Vec<&str> = opts.split_whitespace().collect();
    let command = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-perf"));
        cmd.args(&opts);
        if let Some(p) = provider {
            cmd.env("XFER_PROVIDER", p);
        }
        cmd
    };
    let mut cmd = command();
    cmd.arg("server");
    let mut server = Proc::spawn("xfer-perf server", cmd);
    let first = server.line(deadline);
    let name = first
        .strip_prefix("xfer-perf server: ")
        .unwrap_or_else(|| panic!("unexpected first server line {first:?}"))
        .to_string();
    let mut cmd = command();
    cmd.args(["client", &name]);
    let (status, lines, err) = Proc::spawn("xfer-perf client", cmd).finish(deadline);
    assert!(status.success(), "{provider:?}: {status}\n{}\n{err}", lines.join("\n"));
    let (status, _, err) = server.finish(deadline);
    assert!(status.success(), "{provider:?} server: {status}\n{err}");
    lines
}

/// The JSON result line of `test` at `size`.
fn result_line<'a>(lines: &'a [String], provider: &str, test: &str, size: usize) -> &'a str {
    let key = format!("\"test\":\"{test}\",\"size\":{size},");
    lines.iter().find(|l| l.contains(&key)).unwrap_or_else(|| {
        panic!("{provider}: no {test} {size} result in:\n{}", lines.join("\n"));
    })
}

/// `--buffers per-op` (an owned buffer per operation) and the default shared
/// buffer both stream and check the pattern, in one process; the JSON line
/// names the mode and the window.
#[test]
fn xfer_perf_buffer_modes() {
    let deadline = Instant::now() + DEADLINE;
    for mode in ["shared", "per-op"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-perf"));
        cmd.args([
            "--json",
            "--test",
            "tag_bw,tag_rate,put_bw,get_bw",
            "--sizes",
            "64,256k",
        ])
        .args(["--iters", "100", "--window", "8", "--buffers", mode]);
        let (status, lines, err) = Proc::spawn("xfer-perf", cmd).finish(deadline);
        assert!(status.success(), "{mode}: {status}\n{}\n{err}", lines.join("\n"));
        assert_eq!(lines.len(), 8, "{mode}: {}", lines.join("\n"));
        for line in &lines {
            assert!(line.contains(&format!("\"window\":8,\"buffers\":\"{mode}\"")), "{line}");
            assert!(json_number(line, "mib_s") > 0.0, "{line}");
        }
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-perf"));
    cmd.args(["--buffers", "some"]);
    let (status, _, err) = Proc::spawn("xfer-perf --buffers some", cmd).finish(deadline);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("unknown buffer mode"), "{err}");
}

/// A short soak: mixed traffic between two processes, every payload checked,
/// both sides' counts equal, memory and descriptors sampled; a bad argument
/// is refused. (The 10-minute run is a benchmark: docs/SOAK.md.)
#[test]
fn xfer_soak_short_run_passes() {
    let deadline = Instant::now() + DEADLINE;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-soak"));
    cmd.args(["--seconds", "3", "--every", "1"]);
    let (status, lines, err) = Proc::spawn("xfer-soak", cmd).finish(deadline);
    let out = lines.join("\n");
    assert!(status.success(), "{status}\n{out}\n{err}");
    let verdict = lines.last().map_or("", |l| l.as_str());
    assert!(verdict.starts_with("xfer-soak: PASS ops="), "{out}");
    assert!(lines.iter().filter(|l| l.starts_with("t=")).count() >= 3, "{out}");
    let ops: u64 = verdict["xfer-soak: PASS ops=".len()..]
        .split(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(ops > 20, "{out}");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-soak"));
    cmd.args(["--seconds", "x"]);
    let (status, _, err) = Proc::spawn("xfer-soak --seconds x", cmd).finish(deadline);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a number"), "{err}");
}

#[test]
fn xfer_perf_refuses_a_bad_server_name() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-perf"));
    cmd.args(["client", "zz"]);
    let (status, _, err) = Proc::spawn("xfer-perf client zz", cmd).finish(Instant::now() + DEADLINE);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a hex endpoint name"), "{err}");
}

/// `--progress` puts a progress line on standard error once the run has lasted
/// two intervals; standard output keeps only the JSON results. Without it, and
/// with standard error not a terminal, there is no such line.
#[test]
fn xfer_perf_progress_line() {
    let deadline = Instant::now() + DEADLINE;
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-perf"));
        cmd.args([
            "--json",
            "--test",
            "tag_lat,tag_bw",
            "--sizes",
            "64k",
            "--iters",
            "1000",
        ])
        .args(extra);
        let (status, lines, err) = Proc::spawn("xfer-perf local", cmd).finish(deadline);
        assert!(
            status.success(),
            "xfer-perf failed: {status}\n{}\n{err}",
            lines.join("\n")
        );
        assert_eq!(lines.len(), 2, "{}", lines.join("\n"));
        for line in &lines {
            assert!(
                line.starts_with("{\"tool\":\"xfer-perf\"") && line.ends_with('}'),
                "{line}"
            );
        }
        err
    };
    let err = run(&["--progress=0.002"]);
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with("xfer-perf: [")).collect();
    assert!(
        progress
            .iter()
            .any(|l| l.starts_with("xfer-perf: [1/2] tag_lat 65536 B: ") && l.contains("/1100 iterations, ")),
        "no tag_lat progress line in:\n{err}"
    );
    assert!(!err.contains('\r'), "stderr is not a terminal, yet:\n{err:?}");
    let err = run(&[]);
    assert!(
        !err.contains("iterations"),
        "a progress line without --progress:\n{err}"
    );
}
