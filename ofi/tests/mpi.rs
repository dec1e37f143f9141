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
//!   and `btl ofi` into the plug-in's shm and tcp domains (its own
//!   `mpirun` options), and over `osc ucx` as the reference.
//!
//! Each run must exit 0, and every rank must log (`XFER_LOG=xfer_fi::ep=info`)
//! that its xfer endpoint closed after carrying receives, over the expected
//! xfer provider (`XFER_PROVIDER`, else `tcp`): the proof that xfer carried
//! the traffic. Needs `openmpi-bin libopenmpi-dev netpipe-openmpi`
//! (scripts/setup.sh installs them).
//!
//! Knobs: `XFER_MPI_MAX_BYTES` (mpi_check's largest message, default 16 MiB),
//! `XFER_MPI_NETPIPE_MAX` (NetPIPE's `-u`, default 1 MiB), `XFER_OFI_TEST_DIR`
//! (a directory already holding libxfer_fi.so and mpi_check, used as is: the
//! Soft-RoCE guest's read-only file system, tests/vm/all.sh step `mpi`).
//! Every `XFER_*` variable is passed on to the ranks.

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

/// `ofi/tests/c/NAME.c` compiled with mpicc into the provider directory.
fn mpicc(name: &str) -> PathBuf {
    let exe = common::provider_dir().join(name);
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

/// mpi_check: the prebuilt one in `XFER_OFI_TEST_DIR`, else compiled now.
fn mpi_check() -> PathBuf {
    let exe = dir().join("mpi_check");
    if std::env::var_os("XFER_OFI_TEST_DIR").is_some() {
        assert!(
            exe.exists(),
            "{} missing (tests/vm/build-verbs.sh builds it)",
            exe.display()
        );
        return exe;
    }
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/mpi_check.c");
    let out = Command::new("mpicc")
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("mpicc not found: apt-get install libopenmpi-dev (scripts/setup.sh)");
    check("compiling mpi_check.c with mpicc", &out);
    exe
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
    cmd.args(["-x", "XFER_TCP_ADDR"]);
    let mut names: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("XFER_") && k != "XFER_TCP_ADDR")
        .collect();
    names.push("XFER_LOG".into());
    names.sort();
    names.dedup();
    for name in names {
        cmd.args(["-x", &name]);
    }
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
    let exe = mpi_check();
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
/// over UCX (`osc ucx`, the reference).
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
                .env("XFER_TCP_ADDR", "127.0.0.1")
                .args(["--mca", "osc", "rdma", "--mca", "btl", "ofi,self"])
                .args([
                    "--mca",
                    "btl_ofi_provider_include",
                    "xfer",
                    "--mca",
                    "btl_ofi_mode",
                    "2",
                ])
                .args(["-x", "FI_PROVIDER", "-x", "FI_PROVIDER_PATH", "-x", "XFER_PROVIDER"])
                .args(["-x", "XFER_TCP_ADDR", "-x", "XFER_LOG"]);
        }
        None => {
            cmd.args(["--mca", "osc", "ucx"]);
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

/// MPI one-sided communication (`ofi/tests/c/mpi_onesided.c`: `MPI_Put`,
/// `MPI_Get`, `MPI_Accumulate`, `MPI_Fetch_and_op`, `MPI_Compare_and_swap`
/// on 4 ranks, every result checked) over Open MPI's `osc rdma` on `btl
/// ofi` into the plug-in's domains that apply atomics (shm, tcp), and
/// the same program over `osc ucx` as the reference. Every rank's xfer
/// endpoint must have carried atomics but the target rank's (its own
/// fetch-and-ops stay in its process), which proves `osc rdma` used the
/// plug-in's `FI_ATOMIC` rather than falling back to locks and gets.
/// Skipped in the Soft-RoCE guest (`XFER_OFI_TEST_DIR`), where the MPI step
/// runs the two-sided programs only.
#[test]
fn mpi_onesided_four_ranks() {
    if std::env::var_os("XFER_OFI_TEST_DIR").is_some() {
        eprintln!("mpi_onesided: skipped in the guest (run on the host over shm and tcp)");
        return;
    }
    let exe = mpicc("mpi_onesided");
    let done = "mpi_onesided: 4 ranks, all checks passed";
    let out = onesided(&exe, None);
    check("mpi_onesided over osc ucx (the reference)", &out);
    assert!(String::from_utf8_lossy(&out.stdout).contains(done));
    for provider in ["shm", "tcp"] {
        let out = onesided(&exe, Some(provider));
        check(&format!("mpi_onesided over osc rdma, btl ofi, xfer {provider}"), &out);
        assert!(String::from_utf8_lossy(&out.stdout).contains(done));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let closed: Vec<&str> = stderr.lines().filter(|l| l.contains("xfer endpoint closed")).collect();
        assert_eq!(closed.len(), 4, "one closed xfer endpoint per rank expected:\n{stderr}");
        let mut carried = 0;
        for line in closed {
            eprintln!("{line}");
            assert!(
                line.contains(&format!("provider=\"{provider}\"")),
                "not over {provider}: {line}"
            );
            let atomics = line
                .split("atomics=")
                .nth(1)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok());
            carried += usize::from(atomics.is_some_and(|n| n >= 200));
        }
        assert!(
            carried >= 3,
            "ranks 1 to 3 each did 200 fetch-and-ops through xfer:\n{stderr}"
        );
    }
}
