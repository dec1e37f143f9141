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

#[test]
fn c_suite_over_libfabric() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fi_suite.c");
    let exe = common::provider_dir().join("ofi_fi_suite");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lfabric")
        .output()
        .expect("running the C compiler");
    check("compiling fi_suite.c (needs libfabric-dev)", &out);
    let run = fi_command(exe.to_str().expect("utf-8 path"))
        .spawn()
        .expect("running fi_suite");
    let out = wait_output(run, "fi_suite", Duration::from_secs(60));
    check("fi_suite", &out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}
