//! ofi/tests/c/fi_suite.c: a C program written against libfabric's API
//! (`cc ... -lfabric`, nothing of xfer's), run with `FI_PROVIDER=xfer` over
//! libxfer_fi.so: directed and any-source tagged receives with source
//! addresses, truncation through fi_cq_readerr with both lengths, inject,
//! cancel, and the calls xfer refuses; over the xfer domain `XFER_PROVIDER`
//! forces (`make test-shm` runs it over shm). And the shm domain whatever
//! `XFER_PROVIDER` says: fi_shm.c (its addresses and what it refuses) and
//! the one-process programs of the reference suite over it; remote atomics
//! (fi_atomic.c) over shm and tcp; authorization keys between two
//! processes (fi_auth_pair.c) over shm, tcp and shm+tcp.

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
/// fi_trecv and fi_cq_read, every payload, length, tag and CQ data checked;
/// and the same with `PATH_COST_SEND=tsenddata` (fi_tsenddata, each send's
/// own completion read: the harness fails unless every send completed once).
#[test]
fn path_cost_harness_runs() {
    let exe = build_c("path_cost.c", "ofi_path_cost");
    for (send, says) in [("", "xfer, "), ("tsenddata", "xfer (fi_tsenddata), ")] {
        let mut cmd = fi_command(exe.to_str().expect("utf-8 path"));
        cmd.args(["2000", "64"]).env("PATH_COST_SEND", send);
        let out = wait_output(
            cmd.spawn().expect("running path_cost"),
            "path_cost",
            Duration::from_secs(60),
        );
        check("path_cost", &out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("2000 round trips of 64 B through libfabric over {says}")),
            "{stdout}"
        );
    }
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
    under_valgrind(&build("ofi_fi_suite_vg"), None, "fi_suite under valgrind");
}

/// fi_atomic.c over shm under valgrind memcheck: the atomics' result
/// buffers, written by the completion router, and everything the
/// capability query opened, clean.
#[test]
fn atomics_under_valgrind() {
    let exe = build_c("fi_atomic.c", "ofi_fi_atomic_vg");
    under_valgrind(&exe, Some("shm"), "fi_atomic under valgrind");
}

/// Runs `exe` under valgrind memcheck (over `XFER_PROVIDER` `provider`
/// when given): it must exit 0 with no error and no definite leak.
fn under_valgrind(exe: &Path, provider: Option<&str>, what: &str) {
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
    .arg(exe);
    if let Some(p) = provider {
        cmd.env("XFER_PROVIDER", p).env_remove("FI_XFER_PROVIDER");
    }
    let out = wait_output(cmd.spawn().expect("running valgrind"), what, Duration::from_secs(600));
    check(what, &out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ERROR SUMMARY: 0 errors"), "{stderr}");
}

/// Runs `exe` with `XFER_PROVIDER` (and `FI_XFER_PROVIDER`) set to
/// `provider`, or removed when `None`: it must exit 0 having printed `done`.
fn run_over(exe: &Path, provider: Option<&str>, done: &str) {
    let mut cmd = fi_command(exe.to_str().expect("utf-8 path"));
    cmd.env_remove("FI_XFER_PROVIDER");
    match provider {
        Some(p) => cmd.env("XFER_PROVIDER", p),
        None => cmd.env_remove("XFER_PROVIDER"),
    };
    let name = exe
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let out = wait_output(cmd.spawn().expect("running a C test"), &name, Duration::from_secs(60));
    check(&name, &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == done), "{name}: no '{done}' in:\n{text}");
}

/// ofi/tests/c/fi_shm.c, the shm domain asked for by name (no
/// `XFER_PROVIDER`): offered with `FI_ADDR_STR` and `FI_RMA_EVENT`; a
/// service, a host name, `FI_SOCKADDR_IN`, an oversized `auth_key` and a
/// TCP name refused, an `auth_key` given back; `fi_getname` is `fi_xfer_shm://` and the name in hex, which
/// as `node` comes back as `dest_addr`, goes into `fi_av_insert` and
/// `fi_av_insertsvc` (a service `-FI_ENOSYS`), carries a message, and
/// `fi_av_straddr`/`fi_av_lookup` give back; bad strings are not inserted.
#[test]
fn shm_addresses_and_refusals() {
    let exe = build_c("fi_shm.c", "ofi_fi_shm");
    run_over(&exe, None, "all shm checked");
}

/// The reference suite's one-process programs over shm: remote counters
/// (`FI_RMA_EVENT`, counters bound to regions), RMA with counters and
/// segments, event queues and waits, several buffers per message,
/// multi-receive buffers, completion levels and `FI_SOURCE_ERR`.
#[test]
fn one_process_programs_over_shm() {
    for (src, done) in [
        ("fi_rma_event.c", "all rma events checked"),
        ("fi_rma.c", "all rma checked"),
        ("fi_wait.c", "all waits checked"),
        ("fi_iov.c", "all vectors checked"),
        ("fi_multi.c", "all multi-receives checked"),
        ("fi_complete.c", "all completion levels checked"),
        ("fi_source_err.c", "all source_err checked"),
    ] {
        let name = format!("ofi_shm_{}", src.trim_end_matches(".c"));
        run_over(&build_c(src, &name), Some("shm"), done);
    }
}

/// ofi/tests/c/fi_atomic.c over the domains that apply atomics (shm,
/// tcp): every operation on every datatype through every call
/// (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`, their `v` and
/// `msg` forms, `fi_inject_atomic`), fetched values and counters checked,
/// bad keys, bounds and alignment refused with memory left alone, and
/// `fi_query_atomic` / `fi_*atomicvalid`; over xfer, the bad key of an
/// atomic completed when sent shows in the close log line's
/// `atomics_refused_after_completion` and a rate-limited warning.
#[test]
fn atomics_over_shm_and_tcp() {
    let exe = build_c("fi_atomic.c", "ofi_fi_atomic");
    for provider in ["shm", "tcp"] {
        let mut cmd = fi_command(exe.to_str().expect("utf-8 path"));
        cmd.env_remove("FI_XFER_PROVIDER")
            .env("XFER_PROVIDER", provider)
            .env("XFER_LOG", "xfer_fi::ep=info,warn");
        let out = wait_output(
            cmd.spawn().expect("running fi_atomic"),
            "fi_atomic",
            Duration::from_secs(60),
        );
        check(&format!("fi_atomic over {provider}"), &out);
        assert!(String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == "all atomics checked"));
        // The bad key at the default completion level: completed, then
        // counted and logged when the target refused it.
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            log.contains("refused a remote atomic that had completed")
                && log.contains("atomics_refused_after_completion=1"),
            "{provider}: the late refusal is neither logged nor counted:\n{log}"
        );
    }
}

/// ofi/tests/c/fi_auth_pair.c between processes over each of the RDM
/// engine's domains: a server whose `domain_attr->auth_key` is "job-A"
/// answers a client with that key, while a client with "job-B" and one
/// with no key see their sends complete with errors and the server
/// receives nothing of theirs (it fails on any payload but a hello or
/// stop, and counts one hello).
#[test]
fn auth_keys_between_processes_over_engine_domains() {
    use std::io::{BufRead, BufReader};
    let exe = build_c("fi_auth_pair.c", "ofi_fi_auth_pair");
    let run = |provider: &str, args: &[&str]| {
        let mut cmd = fi_command(exe.to_str().expect("utf-8 path"));
        cmd.env_remove("FI_XFER_PROVIDER")
            .env("XFER_PROVIDER", provider)
            .args(args);
        cmd
    };
    for provider in ["shm", "tcp", "shm+tcp"] {
        let mut server = run(provider, &["server", "job-A"]).spawn().expect("running the server");
        let mut lines = BufReader::new(server.stdout.take().expect("piped stdout")).lines();
        let mut name = None;
        for line in lines.by_ref() {
            let line = line.expect("the server's output");
            if let Some(n) = line.strip_prefix("name ") {
                name = Some(n.to_string());
            }
            if line == "ready" {
                break;
            }
        }
        let name = name.unwrap_or_else(|| panic!("{provider}: the server printed no name"));
        for (key, how, want) in [
            ("job-B", "refused", "refused "),
            ("-", "refused", "refused "),
            ("job-A", "ok", "answered"),
        ] {
            let child = run(provider, &["client", &name, key, how])
                .spawn()
                .expect("running a client");
            let what = format!("{provider}: the client with key {key}");
            let out = wait_output(child, &what, Duration::from_secs(60));
            check(&what, &out);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.lines().any(|l| l.starts_with(want)),
                "{what}: no '{want}' in:\n{text}"
            );
        }
        let out = wait_output(server, &format!("{provider}: the server"), Duration::from_secs(60));
        check(&format!("{provider}: the server"), &out);
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(
            rest.iter().any(|l| l == "served 1"),
            "{provider}: the server said {rest:?}"
        );
    }
}
