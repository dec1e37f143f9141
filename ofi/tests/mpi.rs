//! Open MPI over libfabric over xfer: `mpirun --mca pml cm --mca mtl ofi
//! --mca mtl_ofi_provider_include xfer`, so every MPI message goes through
//! the ofi MTL into libxfer_fi.so (the `cm` PML has no shared-memory or TCP
//! path of its own to fall back on).
//!
//! - `mpi_check_four_ranks`: our MPI correctness program
//!   (`ofi/tests/c/mpi_check.c`, compiled with `mpicc`) on 4 ranks: directed,
//!   any-source and any-tag receives, `MPI_Probe`/`MPI_Iprobe`/`MPI_Mprobe`,
//!   0 B to 16 MiB with contents checked, all-to-all.
//! - `netpipe_two_ranks`: NetPIPE (`NPopenmpi`) to 1 MiB between 2 ranks.
//! - `mpi_onesided_four_ranks`: MPI one-sided communication over `osc rdma`
//!   and `btl ofi` into the plug-in's domain `XFER_PROVIDER` (else shm and
//!   tcp; its own `mpirun` options), and over `osc ucx` as the reference.
//!
//! Each run must exit 0, and every rank must log (`XFER_LOG=xfer_fi::ep=info`)
//! that its xfer endpoint closed after carrying receives, over the expected
//! xfer provider (`XFER_PROVIDER`, else `tcp`): the proof that xfer carried
//! the traffic. Needs `openmpi-bin libopenmpi-dev netpipe-openmpi`
//! (scripts/setup.sh installs them).
//!
//! Knobs: `XFER_MPI_MAX_BYTES` (mpi_check's largest message, default 16 MiB),
//! `XFER_MPI_NETPIPE_MAX` (NetPIPE's `-u`, default 1 MiB), `XFER_OFI_TEST_DIR`
//! (a directory already holding libxfer_fi.so, mpi_check and mpi_onesided,
//! used as is: the Soft-RoCE guest's read-only file system, tests/vm/all.sh
//! step `mpi`). Every `XFER_*` variable is passed on to the xfer ranks, every
//! `UCX_*` one to the `osc ucx` ranks.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{check, wait_output};

/// The directory with libxfer_fi.so (and mpi_check once built).
fn dir() -> PathBuf {
    match std::env::var_os("XFER_OFI_TEST_DIR") {
        Some(d) => PathBuf::from(d),
        None => common::provider_dir(),
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.into())
}

/// `ofi/tests/c/NAME.c` compiled with mpicc: the prebuilt one in
/// `XFER_OFI_TEST_DIR` (tests/vm/build-verbs.sh builds it), else compiled
/// now into the provider directory.
fn mpicc(name: &str) -> PathBuf {
    let exe = dir().join(name);
    if std::env::var_os("XFER_OFI_TEST_DIR").is_some() {
        assert!(
            exe.exists(),
            "{} missing (tests/vm/build-verbs.sh builds it)",
            exe.display()
        );
        return exe;
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = Command::new("mpicc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("mpicc not found: apt-get install libopenmpi-dev (scripts/setup.sh)");
    check(&format!("compiling {name}.c with mpicc"), &out);
    exe
}

/// Passes every variable of this process's environment whose name starts
/// with one of `prefixes` (and `extra`) on to the ranks (`-x`).
fn forward_env(cmd: &mut Command, prefixes: &[&str], extra: &[&str]) {
    let mut names: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| prefixes.iter().any(|p| k.starts_with(p)))
        .chain(extra.iter().map(|s| s.to_string()))
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        cmd.args(["-x", &name]);
    }
}

/// `mpirun -np N` over the ofi MTL with provider xfer, `program args`.
fn mpirun(np: usize, program: &str, args: &[String], limit: Duration) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("XFER_LOG", "warn,xfer_fi::ep=info")
        .env("FI_PROVIDER", "xfer")
        .env("FI_PROVIDER_PATH", dir())
        .args(["-np", &np.to_string(), "--oversubscribe"])
        .args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args(["--mca", "mtl_ofi_provider_include", "xfer"])
        .args(["-x", "FI_PROVIDER", "-x", "FI_PROVIDER_PATH"]);
    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        cmd.env("XFER_TCP_ADDR", "127.0.0.1");
    }
    forward_env(&mut cmd, &["XFER_"], &["XFER_TCP_ADDR", "XFER_LOG"]);
    let child = cmd
        .arg(program)
        .args(args)
        .current_dir(std::env::temp_dir()) // NetPIPE writes np.out where it runs
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun not found: apt-get install openmpi-bin (scripts/setup.sh)");
    wait_output(child, &format!("mpirun -np {np} {program}"), limit)
}

/// Asserts that each of the `np` ranks closed an xfer endpoint of the
/// expected provider after receiving through it.
fn xfer_carried(out: &Output, np: usize) {
    let provider = env_or("XFER_PROVIDER", "shm+tcp");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let closed: Vec<&str> = stderr.lines().filter(|l| l.contains("xfer endpoint closed")).collect();
    assert_eq!(
        closed.len(),
        np,
        "one closed xfer endpoint per rank expected:\n{stderr}"
    );
    for line in closed {
        eprintln!("{line}");
        assert!(
            line.contains(&format!("provider=\"{provider}\"")),
            "not over {provider}: {line}"
        );
        let receives = line
            .split("receives=")
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok());
        assert!(receives.is_some_and(|n| n > 0), "no receive went through xfer: {line}");
    }
}

#[test]
fn mpi_check_four_ranks() {
    let exe = mpicc("mpi_check");
    let max = env_or("XFER_MPI_MAX_BYTES", "16777216");
    let out = mpirun(
        4,
        exe.to_str().expect("utf-8 path"),
        std::slice::from_ref(&max),
        Duration::from_secs(600),
    );
    check("mpirun -np 4 mpi_check over xfer", &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("mpi_check: 4 ranks, all checks passed (sizes 0 to {max} bytes");
    assert!(stdout.contains(&want), "{stdout}");
    xfer_carried(&out, 4);
}

#[test]
fn netpipe_two_ranks() {
    let max = env_or("XFER_MPI_NETPIPE_MAX", "1048576");
    let args = ["-u", &max, "-p", "0", "-n", "50"].map(String::from);
    let out = mpirun(2, "NPopenmpi", &args, Duration::from_secs(600));
    check(
        "mpirun -np 2 NPopenmpi over xfer (apt-get install netpipe-openmpi)",
        &out,
    );
    // NetPIPE prints its table on stderr.
    let text = String::from_utf8_lossy(&out.stderr);
    let last = format!("{max} bytes");
    assert!(text.lines().any(|l| l.contains(&last)), "no {last} line:\n{text}");
    xfer_carried(&out, 2);
}

/// `mpirun -np 4 mpi_onesided` with the one-sided component `osc`: over
/// the plug-in's domain `provider` (`osc rdma` on `btl ofi`), or, `None`,
/// over UCX (`osc ucx`, the reference; `UCX_*` variables, such as the
/// guest's `UCX_TLS=rc_v,self`, are passed on to the ranks).
fn onesided(exe: &std::path::Path, provider: Option<&str>) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["-np", "4", "--oversubscribe"]);
    match provider {
        Some(p) => {
            // btl ofi carries MPI's messages too (btl_ofi_mode 2): with
            // only `self` beside it, ob1 has no other way to reach a peer.
            cmd.env("XFER_LOG", "warn,xfer_fi::ep=info")
                .env("FI_PROVIDER", "xfer")
                .env("FI_PROVIDER_PATH", dir())
                .env("XFER_PROVIDER", p)
                .args(["--mca", "osc", "rdma", "--mca", "btl", "ofi,self"])
                .args([
                    "--mca",
                    "btl_ofi_provider_include",
                    "xfer",
                    "--mca",
                    "btl_ofi_mode",
                    "2",
                ])
                .args(["-x", "FI_PROVIDER", "-x", "FI_PROVIDER_PATH"]);
            if std::env::var_os("XFER_TCP_ADDR").is_none() {
                cmd.env("XFER_TCP_ADDR", "127.0.0.1");
            }
            forward_env(&mut cmd, &["XFER_"], &["XFER_PROVIDER", "XFER_TCP_ADDR", "XFER_LOG"]);
        }
        None => {
            cmd.args(["--mca", "osc", "ucx"]);
            forward_env(&mut cmd, &["UCX_"], &[]);
        }
    }
    let child = cmd
        .arg(exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun not found: apt-get install openmpi-bin (scripts/setup.sh)");
    wait_output(child, "mpirun -np 4 mpi_onesided", Duration::from_secs(300))
}

/// The number after `name=` in a log line.
fn field(line: &str, name: &str) -> Option<u64> {
    line.split(&format!(" {name}="))
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// MPI one-sided communication (`ofi/tests/c/mpi_onesided.c`: `MPI_Put`,
/// `MPI_Get`, `MPI_Accumulate`, `MPI_Fetch_and_op`, `MPI_Compare_and_swap`
/// on 4 ranks, every result checked) over Open MPI's `osc rdma` on `btl
/// ofi` into the plug-in's domains (`XFER_PROVIDER` if set, as `verbs` in
/// the Soft-RoCE guest, else shm and tcp), and the same program over `osc
/// ucx` as the reference. Every rank's xfer endpoint must have carried
/// atomics but the target rank's (its own fetch-and-ops stay in its
/// process), which proves `osc rdma` used the plug-in's `FI_ATOMIC` rather
/// than falling back to locks and gets; with `XFER_ATOMIC_MODE=device`
/// those ranks' atomics must have gone by the device (`atomics_device`).
#[test]
fn mpi_onesided_four_ranks() {
    let exe = mpicc("mpi_onesided");
    let done = "mpi_onesided: 4 ranks, all checks passed";
    let out = onesided(&exe, None);
    check("mpi_onesided over osc ucx (the reference)", &out);
    assert!(String::from_utf8_lossy(&out.stdout).contains(done));
    let providers = match std::env::var("XFER_PROVIDER") {
        Ok(p) => vec![p],
        Err(_) => vec!["shm".to_string(), "tcp".to_string()],
    };
    let device = std::env::var("XFER_ATOMIC_MODE").is_ok_and(|m| m == "device");
    for provider in &providers {
        let out = onesided(&exe, Some(provider));
        check(&format!("mpi_onesided over osc rdma, btl ofi, xfer {provider}"), &out);
        assert!(String::from_utf8_lossy(&out.stdout).contains(done));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let closed: Vec<&str> = stderr.lines().filter(|l| l.contains("xfer endpoint closed")).collect();
        assert_eq!(closed.len(), 4, "one closed xfer endpoint per rank expected:\n{stderr}");
        let (mut carried, mut by_device) = (0, 0);
        for line in closed {
            eprintln!("{line}");
            assert!(
                line.contains(&format!("provider=\"{provider}\"")),
                "not over {provider}: {line}"
            );
            carried += usize::from(field(line, "atomics").is_some_and(|n| n >= 200));
            by_device += usize::from(field(line, "atomics_device").is_some_and(|n| n >= 200));
        }
        assert!(
            carried >= 3,
            "ranks 1 to 3 each did 200 fetch-and-ops through xfer:\n{stderr}"
        );
        assert!(
            !device || by_device >= 3,
            "ranks 1 to 3 each did 200 fetch-and-ops by the device:\n{stderr}"
        );
    }
}
