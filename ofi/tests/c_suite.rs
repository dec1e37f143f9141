//! ofi/tests/c/fi_suite.c: a C program written against libfabric's API
//! (`cc ... -lfabric`, nothing of xfer's), run with `FI_PROVIDER=xfer` over
//! libxfer_fi.so: directed and any-source tagged receives with source
//! addresses, truncation through fi_cq_readerr with both lengths, inject,
//! cancel, and the calls xfer refuses.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{check, fi_command, wait_output};

/// Compiles fi_suite.c into target/<profile>/NAME.
fn build(name: &str) -> std::path::PathBuf {
    build_c("fi_suite.c", name)
}

/// Compiles ofi/tests/c/SRC into target/<profile>/NAME.
fn build_c(src: &str, name: &str) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(src);
    let exe = common::provider_dir().join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lfabric")
        .output()
        .expect("running the C compiler");
    check("compiling a C test (needs libfabric-dev)", &out);
    exe
}

/// ofi/tests/c/path_cost.c, the harness docs/OFI.md counts instructions
/// with, keeps working: 2,000 round trips of 64 B through fi_tinjectdata,
/// fi_trecv and fi_cq_read, every payload, length, tag and CQ data checked.
#[test]
fn path_cost_harness_runs() {
    let exe = build_c("path_cost.c", "ofi_path_cost");
    let mut cmd = fi_command(exe.to_str().expect("utf-8 path"));
    cmd.args(["2000", "64"]);
    let out = wait_output(
        cmd.spawn().expect("running path_cost"),
        "path_cost",
        Duration::from_secs(60),
    );
    check("path_cost", &out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("2000 round trips of 64 B"));
}

#[test]
fn c_suite_over_libfabric() {
    let exe = build("ofi_fi_suite");
    let run = fi_command(exe.to_str().expect("utf-8 path"))
        .spawn()
        .expect("running fi_suite");
    let out = wait_output(run, "fi_suite", Duration::from_secs(60));
    check("fi_suite", &out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}

/// The same suite under valgrind memcheck: no invalid access and no leak
/// across the boundary (libfabric frees the fi_infos we allocate, closes
/// every object, unloads the provider). Skipped without valgrind unless
/// `XFER_REQUIRE_VALGRIND` is set (as `make test` does).
#[test]
fn c_suite_under_valgrind() {
    let have = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("XFER_REQUIRE_VALGRIND").is_none(),
            "XFER_REQUIRE_VALGRIND is set but valgrind is not installed"
        );
        eprintln!("valgrind not installed: the memcheck run is skipped");
        return;
    }
    let exe = build("ofi_fi_suite_vg");
    let supp = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/valgrind.supp");
    let mut cmd = fi_command("valgrind");
    cmd.args([
        "--tool=memcheck",
        "--error-exitcode=1",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--keep-debuginfo=yes",
    ])
    .arg(format!("--suppressions={}", supp.display()))
    .arg(&exe);
    let out = wait_output(
        cmd.spawn().expect("running valgrind"),
        "fi_suite under valgrind",
        Duration::from_secs(600),
    );
    check("fi_suite under valgrind", &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ERROR SUMMARY: 0 errors"), "{stderr}");
}
