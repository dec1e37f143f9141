//! tarpc over xfer between real processes: the `xfer-rpc` server and client
//! (every call's result checked by the client: add, echo and sum of 0 B to
//! 1 MiB, 256 mixed calls with 64 outstanding), the one-process mode, and a
//! short benchmark run (its figures are printed, not judged).
//!
//! Runs over the provider xfer opens (`XFER_PROVIDER`; TCP on 127.0.0.1 by
//! default); the Soft-RoCE guest runs it with `XFER_PROVIDER=verbs`
//! (tests/vm/all.sh, step `rpc`). Every child is killed when its test fails
//! or its deadline passes.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long one process may take (generous: the guest emulates its CPU).
const DEADLINE: Duration = Duration::from_secs(120);

/// A child `xfer-rpc` whose output threads read; killed when dropped.
struct Proc {
    what: String,
    child: Child,
    stdout: Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl Proc {
    fn spawn(what: &str, args: &[&str]) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_xfer-rpc"));
        if std::env::var_os("XFER_TCP_ADDR").is_none() {
            cmd.env("XFER_TCP_ADDR", "127.0.0.1");
        }
        let mut child = cmd
            .args(args)
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

    /// The next line of output, within the deadline.
    fn line(&mut self) -> String {
        match self.stdout.recv_timeout(DEADLINE) {
            Ok(l) => l,
            Err(_) => {
                let err = self.stderr();
                panic!("{}: no output line within {DEADLINE:?}; stderr: {err}", self.what)
            }
        }
    }

    fn stderr(&mut self) -> String {
        let _ = self.child.kill();
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }

    /// Waits for the exit within the deadline; the rest of its stdout.
    fn finish(&mut self) -> (ExitStatus, Vec<String>) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The reader thread may still hold lines: take them until it
                // sees the pipe close.
                let mut rest = Vec::new();
                while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(10)) {
                    rest.push(line);
                }
                return (status, rest);
            }
            if start.elapsed() > DEADLINE {
                let err = self.stderr();
                panic!("{}: still running after {DEADLINE:?}; stderr: {err}", self.what);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for a successful exit; its remaining stdout lines.
    fn succeeds(&mut self) -> Vec<String> {
        let (status, rest) = self.finish();
        if !status.success() {
            let err = self.stderr();
            panic!("{} failed ({status}); stdout: {rest:?}; stderr: {err}", self.what);
        }
        rest
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The provider the processes should report: `XFER_PROVIDER`, or any.
fn expected_provider() -> Option<String> {
    std::env::var("XFER_PROVIDER").ok().filter(|p| !p.is_empty())
}

#[test]
fn calls_are_correct_between_two_processes_over_xfer_and_tokio_tcp() {
    let mut server = Proc::spawn("xfer-rpc server", &["server", "--tcp", "127.0.0.1:0", "--conns", "1"]);
    let first = server.line();
    let (provider, name) = first
        .strip_prefix("xfer-rpc server: provider ")
        .and_then(|r| r.split_once(", name "))
        .unwrap_or_else(|| panic!("unexpected server line {first:?}"));
    if let Some(p) = expected_provider() {
        assert_eq!(provider, p, "the server opened another provider than XFER_PROVIDER");
    }
    let second = server.line();
    let tcp = second
        .strip_prefix("xfer-rpc server: tcp ")
        .unwrap_or_else(|| panic!("unexpected server line {second:?}"));

    let mut client = Proc::spawn("xfer-rpc client", &["client", name, "--tcp", tcp]);
    let out = client.succeeds();
    assert_eq!(out.len(), 2, "client output: {out:?}");
    assert!(
        out[0].starts_with("xfer-rpc client: ") && out[0].ends_with(&format!("calls correct over xfer ({provider})")),
        "{out:?}"
    );
    assert!(out[1].ends_with("calls correct over tokio TCP"), "{out:?}");
    // Both connections closed: the server, told to serve one of each, exits.
    server.succeeds();
}

#[test]
fn calls_are_correct_in_one_process() {
    let out = Proc::spawn("xfer-rpc local", &["local"]).succeeds();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].starts_with("xfer-rpc local: "), "{out:?}");
    if let Some(p) = expected_provider() {
        assert!(out[0].ends_with(&format!("over xfer ({p})")), "{out:?}");
    }
}

/// The benchmark mode runs end to end (a few calls); figures not judged.
#[test]
fn bench_mode_runs() {
    let args = ["bench", "--iters", "200", "--calls", "2000", "--reps", "1"];
    let out = Proc::spawn("xfer-rpc bench", &args).succeeds();
    println!("{}", out.join("\n"));
    // The default row (the async layer's default spin window), parking,
    // and tokio TCP, each with its ratio to tokio TCP.
    for row in ["xfer spin 50us", "xfer parking"] {
        assert!(
            out.iter().any(|l| l.starts_with(&format!("  {row} / tokio TCP: p50 "))),
            "no ratio line for {row}: {out:?}"
        );
    }
}
