//! Re-running a test binary's own tests under valgrind memcheck: an invalid
//! read or write (a transport touching a buffer after its future was dropped,
//! say) or a definite leak fails the outer test. The inner run is the same
//! binary with `XFER_UNDER_MEMCHECK=1`, which makes the outer test a no-op.

use std::process::Command;

/// Set in the inner run.
const INNER: &str = "XFER_UNDER_MEMCHECK";

/// Runs every test of this binary except those matching `skip` under
/// memcheck, one thread at a time. Skips (with a message) without valgrind,
/// unless `XFER_REQUIRE_VALGRIND` is set, and on a provider other than TCP
/// (the guest's verbs run: memcheck under TCG takes hours).
pub fn rerun_self(skip: &str) {
    if std::env::var_os(INNER).is_some() {
        return;
    }
    if std::env::var("XFER_PROVIDER").is_ok_and(|p| !p.is_empty() && p != "tcp") {
        eprintln!("memcheck run skipped: only over TCP");
        return;
    }
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
    let exe = std::env::current_exe().expect("own test binary");
    let out = Command::new("valgrind")
        .args([
            "--tool=memcheck",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
        ])
        .arg(&exe)
        .args(["--test-threads=1", "--skip", skip])
        .env(INNER, "1")
        .env("XFER_PROVIDER", "tcp")
        .output()
        .expect("run valgrind");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "memcheck run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stderr.contains("ERROR SUMMARY: 0 errors"), "{stderr}");
    assert!(stdout.contains("test result: ok"), "{stdout}");
}
