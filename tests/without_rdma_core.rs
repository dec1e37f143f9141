//! The shipped programs start and run over TCP on a host without rdma-core.
//!
//! Each program runs in a mount namespace of its own where `libibverbs.so.1`
//! and `librdmacm.so.1` are covered by an empty file (as a slim container or a
//! broken install has them): `xfer-info`, `xfer-perf` (local), the Rust
//! `pingpong` example between two processes, and the C `pingpong` example
//! linked against `libxfer.so`. verbs is reported unavailable for the reason
//! "no rdma-core", and everything else works. The same binaries use verbs in
//! the Soft-RoCE guest (tests/vm/all.sh). No artifact lists rdma-core among
//! the libraries it needs at start-up (`readelf -d`).
//!
//! The namespaces need root (CI runs as root); elsewhere the test says why it
//! skipped, unless `XFER_REQUIRE_UNSHARE` is set, which makes that a failure.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one program may run.
const LIMIT: Duration = Duration::from_secs(120);

/// The sonames the verbs provider opens at run time.
const RDMA_CORE: [&str; 2] = ["libibverbs.so.1", "librdmacm.so.1"];

/// The target directory's profile dir (`target/debug`), from this test's path
/// (`<profile>/deps/without_rdma_core-<hash>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("profile dir").to_path_buf()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `cmd` to completion within [`LIMIT`].
fn run(what: &str, mut cmd: Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
    finish(what, child)
}

/// Waits for `child` within [`LIMIT`], killing it past that.
fn finish(what: &str, mut child: Child) -> Output {
    let deadline = Instant::now() + LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("collect output"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("collect output");
                panic!(
                    "{what} did not finish within {LIMIT:?}\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

fn check(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The real files behind rdma-core's sonames, from the loader's cache.
fn rdma_core_files() -> Vec<PathBuf> {
    let out = run("ldconfig -p", {
        let mut c = Command::new("ldconfig");
        c.arg("-p");
        c
    });
    let list = check("ldconfig -p", &out);
    let mut files: Vec<PathBuf> = list
        .lines()
        .filter(|l| RDMA_CORE.iter().any(|so| l.trim_start().starts_with(so)))
        .filter_map(|l| l.rsplit("=> ").next())
        .filter_map(|p| std::fs::canonicalize(p.trim()).ok())
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Whether this process may make mount namespaces; `None` after printing
/// why the test is skipped.
fn namespaces() -> Option<&'static [PathBuf]> {
    static FILES: OnceLock<Option<Vec<PathBuf>>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let probe = Command::new("unshare")
                .args(["--mount", "--propagation", "private", "true"])
                .stderr(Stdio::null())
                .status();
            if !probe.is_ok_and(|s| s.success()) {
                assert!(
                    std::env::var_os("XFER_REQUIRE_UNSHARE").is_none(),
                    "XFER_REQUIRE_UNSHARE is set but `unshare --mount` is not permitted (run as root)"
                );
                eprintln!("skipped: `unshare --mount` is not permitted here (needs root)");
                return None;
            }
            let files = rdma_core_files();
            assert!(
                !files.is_empty(),
                "rdma-core is not installed on the build host: nothing to hide (ldconfig -p)"
            );
            Some(files)
        })
        .as_deref()
}

/// `program args…` in a mount namespace where rdma-core's libraries are
/// covered by an empty file.
fn hidden(files: &[PathBuf], program: &Path) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-ec"])
        .arg(r#"for f in $XFER_HIDE; do mount --bind /dev/null "$f"; done; exec "$@""#)
        .arg("sh")
        .arg(program)
        .env(
            "XFER_HIDE",
            files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
        )
        .env("XFER_TCP_ADDR", "127.0.0.1")
        .env_remove("XFER_PROVIDER");
    c
}

/// Starts a `pingpong` server (Rust or C: both print `pingpong server: NAME`)
/// and runs a client against it, both without rdma-core.
fn pingpong(files: &[PathBuf], exe: &Path, client_args: &[&str], lib_dir: Option<&Path>) -> String {
    let mut server = hidden(files, exe);
    server.arg("server").stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(dir) = lib_dir {
        server.env("LD_LIBRARY_PATH", dir);
    }
    let mut server = server.spawn().expect("start the pingpong server");
    let mut lines = BufReader::new(server.stdout.take().expect("piped"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("read the server's name");
    let Some(name) = first.trim().strip_prefix("pingpong server: ").map(str::to_owned) else {
        let _ = server.kill();
        let mut err = String::new();
        let _ = server.stderr.take().map(|mut e| e.read_to_string(&mut err));
        panic!("{}: unexpected first line {first:?}\n{err}", exe.display());
    };
    let mut client = hidden(files, exe);
    client.arg("client").arg(&name).args(client_args);
    if let Some(dir) = lib_dir {
        client.env("LD_LIBRARY_PATH", dir);
    }
    let out = run("pingpong client", client);
    let text = check(&format!("{} client", exe.display()), &out);
    let mut rest = String::new();
    lines.read_to_string(&mut rest).expect("read the server's output");
    let status = finish("pingpong server", server).status;
    assert!(status.success(), "{} server: {status}\n{rest}", exe.display());
    text
}

/// Builds a package target with the test's profile and target directory.
fn cargo_build(args: &[&str]) {
    let profile = profile_dir();
    let target = profile.parent().expect("target dir");
    let mut c = Command::new(env!("CARGO"));
    c.arg("build")
        .args(args)
        .arg("--target-dir")
        .arg(target)
        .current_dir(root());
    if profile.file_name().and_then(|p| p.to_str()) == Some("release") {
        c.arg("--release");
    }
    check(&format!("cargo build {}", args.join(" ")), &run("cargo build", c));
}

/// The libraries `path` needs at start-up (`readelf -d`'s NEEDED entries).
fn needed(path: &Path) -> Vec<String> {
    let out = run("readelf -d", {
        let mut c = Command::new("readelf");
        c.arg("-d").arg(path);
        c
    });
    check(&format!("readelf -d {}", path.display()), &out)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).map(|s| s.trim_end_matches(']').to_owned()))
        .collect()
}

#[test]
fn xfer_info_reports_no_rdma_core_and_picks_shm_tcp() {
    let Some(files) = namespaces() else { return };
    let out = run("xfer-info", hidden(files, Path::new(env!("CARGO_BIN_EXE_xfer-info"))));
    let text = check("xfer-info without rdma-core", &out);
    let verbs = text
        .lines()
        .find(|l| l.trim_start().starts_with("verbs "))
        .unwrap_or_else(|| panic!("no verbs line:\n{text}"));
    assert!(
        verbs.contains("unavailable") && verbs.contains("no rdma-core: "),
        "{verbs}"
    );
    assert!(
        verbs.contains("libibverbs.so.1"),
        "the reason names the library: {verbs}"
    );
    assert!(text.contains("open_default() picks: shm+tcp"), "{text}");
    assert!(text.contains("verbs devices: none (no rdma-core: "), "{text}");

    // The same program with rdma-core in place gets past loading it: whatever
    // this host's devices, the reason (if any) is another.
    let out = run("xfer-info", {
        let mut c = Command::new(env!("CARGO_BIN_EXE_xfer-info"));
        c.env("XFER_TCP_ADDR", "127.0.0.1").env_remove("XFER_PROVIDER");
        c
    });
    let text = check("xfer-info", &out);
    assert!(!text.contains("no rdma-core"), "{text}");
}

#[test]
fn xfer_perf_runs_over_the_default() {
    let Some(files) = namespaces() else { return };
    let mut cmd = hidden(files, Path::new(env!("CARGO_BIN_EXE_xfer-perf")));
    cmd.args([
        "--test",
        "tag_lat,tag_bw",
        "--sizes",
        "8,64k",
        "--iters",
        "200",
        "--json",
    ]);
    let text = check("xfer-perf without rdma-core", &run("xfer-perf", cmd));
    assert_eq!(text.lines().filter(|l| l.contains("\"test\":")).count(), 4, "{text}");
    assert!(text.contains("\"provider\":\"shm+tcp\""), "{text}");
}

#[test]
fn rust_example_runs_between_two_processes() {
    let Some(files) = namespaces() else { return };
    cargo_build(&["--example", "pingpong"]);
    let exe = profile_dir().join("examples/pingpong");
    assert!(
        !needed(&exe).iter().any(|l| RDMA_CORE.contains(&l.as_str())),
        "{}",
        exe.display()
    );
    let text = pingpong(files, &exe, &[], None);
    assert!(text.contains("average half-round-trip latency"), "{text}");
}

#[test]
fn c_program_linked_against_libxfer_runs() {
    let Some(files) = namespaces() else { return };
    cargo_build(&["-p", "xfer-capi", "--lib"]);
    let lib_dir = profile_dir();
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pingpong-c-no-rdma-core");
    let cc = run("cc", {
        let mut c = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        c.current_dir(root())
            .args(["examples/c/pingpong.c", "-Iinclude"])
            .arg(format!("-L{}", lib_dir.display()))
            .args(["-lxfer", "-o"])
            .arg(&exe);
        c
    });
    check("compiling examples/c/pingpong.c", &cc);
    let text = pingpong(files, &exe, &["200", "4096"], Some(&lib_dir));
    assert!(text.contains("200 rounds of 4096 bytes"), "{text}");
}

/// Nothing xfer ships loads rdma-core at start-up: it is opened at run time
/// by the verbs provider. (libxfer_fi.so needs libfabric.so.1, its host; on
/// Debian that library itself links rdma-core, so `fi_info` cannot run where
/// rdma-core is absent, whatever the plug-in does.)
#[test]
fn no_artifact_needs_rdma_core_at_start_up() {
    cargo_build(&["-p", "xfer-capi", "-p", "xfer-ofi", "--lib"]);
    let dir = profile_dir();
    for path in [
        PathBuf::from(env!("CARGO_BIN_EXE_xfer-info")),
        PathBuf::from(env!("CARGO_BIN_EXE_xfer-perf")),
        dir.join("libxfer.so"),
        dir.join("libxfer_fi.so"),
    ] {
        let libs = needed(&path);
        assert!(
            libs.iter().any(|l| l.starts_with("libc.so")),
            "{}: {libs:?}",
            path.display()
        );
        for so in RDMA_CORE {
            assert!(!libs.iter().any(|l| l == so), "{} needs {so}: {libs:?}", path.display());
        }
    }
}
