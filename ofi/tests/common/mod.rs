//! Shared by the tests that run real libfabric programs over libxfer_fi.so.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A directory holding only the libxfer_fi.so of this test build, for
/// `FI_PROVIDER_PATH`. `cargo test` leaves the fresh library in
/// `target/<profile>/deps/` (the `target/<profile>/` copy is only updated by
/// `cargo build`), so it is copied from there into `target/<profile>/ofi-test/`
/// (through a temporary name and a rename: concurrent tests never see half a file).
pub fn provider_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let deps = exe.parent().expect("test binary lives in target/<profile>/deps");
        let lib = deps.join("libxfer_fi.so");
        assert!(
            lib.exists(),
            "{} missing: cargo test -p xfer-ofi builds it",
            lib.display()
        );
        let dir = deps.parent().expect("target/<profile>").join("ofi-test");
        std::fs::create_dir_all(&dir).expect("creating target/<profile>/ofi-test");
        let tmp = dir.join(format!("libxfer_fi.so.{}.tmp", std::process::id()));
        std::fs::copy(&lib, &tmp).expect("copying libxfer_fi.so");
        std::fs::rename(&tmp, dir.join("libxfer_fi.so")).expect("renaming libxfer_fi.so");
        dir
    })
    .clone()
}

/// A command with the environment that makes libfabric load xfer and xfer
/// listen on loopback.
pub fn fi_command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("FI_PROVIDER_PATH", provider_dir())
        .env("FI_PROVIDER", "xfer")
        .env("XFER_TCP_ADDR", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A loopback TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// Whether a socket listens on `port` (from /proc/net/tcp, without
/// connecting: a probe connection would be taken for the peer).
pub fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let want = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
    })
}

/// Waits until `port` is listening, or fails after `limit`.
pub fn wait_listening(port: u16, child: &mut Child, limit: Duration) {
    let end = Instant::now() + limit;
    while !listening(port) {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("server exited ({status}) before listening on port {port}");
        }
        assert!(Instant::now() < end, "nothing listening on port {port} after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` at most `limit`; kills it and fails past that.
pub fn wait_output(mut child: Child, what: &str, limit: Duration) -> Output {
    let end = Instant::now() + limit;
    loop {
        match child.try_wait().expect("waiting for a child") {
            Some(_) => return child.wait_with_output().expect("collecting output"),
            None if Instant::now() >= end => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("collecting output");
                panic!(
                    "{what} still running after {limit:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Fails with both output streams unless `out` exited 0.
pub fn check(what: &str, out: &Output) {
    let status: ExitStatus = out.status;
    assert!(
        status.success(),
        "{what} failed ({status}).\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
