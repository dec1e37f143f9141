//! libfabric's own fi_pingpong (libfabric-bin) between two processes over
//! xfer's TCP provider on loopback (or the one `XFER_PROVIDER` forces:
//! `make test-shm` runs them over shm), through libxfer_fi.so: RDM
//! endpoints, message and tagged modes, every default size (64 B eager and
//! inject up to 1 MiB rendezvous), with fi_pingpong's data check (`-c`).
//! fi_pingpong exchanges the endpoints' names over its own TCP socket
//! (`-B`/`-P`), so no xfer domain needs a service.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{check, fi_command, free_port, wait_listening, wait_output};

const LIMIT: Duration = Duration::from_secs(120);

/// The xfer domain the tests ask for (`-d`): the provider `XFER_PROVIDER`
/// forces, else tcp.
fn domain() -> String {
    std::env::var("XFER_PROVIDER")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "shm+tcp".into())
}

/// Runs an fi_pingpong server (with `server_env` set) and client with `args`
/// on a free port of loopback: their outputs (client, server).
fn run_pair(args: &[&str], server_env: &[(&str, &str)]) -> (Output, Output) {
    let port = free_port().to_string();
    let mut server = fi_command("fi_pingpong")
        .envs(server_env.iter().copied())
        .args(args)
        .args(["-B", &port])
        .spawn()
        .expect("fi_pingpong not found: install libfabric-bin (scripts/setup.sh)");
    wait_listening(port.parse().expect("port"), &mut server, Duration::from_secs(30));
    let client = fi_command("fi_pingpong")
        .args(args)
        .args(["-P", &port, "127.0.0.1"])
        .spawn()
        .expect("spawning the fi_pingpong client");
    let client = wait_output(client, "fi_pingpong client", LIMIT);
    let server = wait_output(server, "fi_pingpong server", LIMIT);
    (client, server)
}

fn pingpong(mode: &str) {
    let domain = domain();
    let args = ["-p", "xfer", "-d", &domain, "-e", "rdm", "-m", mode, "-I", "20", "-c"];
    let (client, server) = run_pair(&args, &[]);
    check("fi_pingpong client", &client);
    check("fi_pingpong server", &server);
    let report = String::from_utf8_lossy(&client.stdout);
    for size in ["64 ", "4k ", "64k ", "1m "] {
        assert!(
            report.lines().any(|l| l.starts_with(size) && l.contains("=20")),
            "no {size}line with 20 acknowledged transfers in:\n{report}"
        );
    }
}

#[test]
fn fi_pingpong_rdm_msg() {
    pingpong("msg");
}

#[test]
fn fi_pingpong_rdm_tagged() {
    pingpong("tagged");
}

#[test]
fn fi_info_lists_xfer() {
    let out = fi_command("fi_info")
        .args(["-p", "xfer"])
        .output()
        .expect("fi_info (libfabric-bin)");
    check("fi_info -p xfer", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("provider: xfer"), "{text}");
    assert!(text.contains(&format!("domain: {}", domain())), "{text}");
    // shm reaches this host only: listed when chosen, never beside tcp.
    let lists_shm = text.lines().any(|l| l.trim() == "domain: shm");
    assert_eq!(lists_shm, domain() == "shm", "{text}");
    assert!(text.contains("FI_EP_RDM"), "{text}");
    // Hints xfer cannot honour are refused, not papered over.
    let out = fi_command("fi_info")
        .args(["-p", "xfer", "-t", "FI_EP_MSG"])
        .output()
        .expect("fi_info");
    assert!(
        !out.status.success(),
        "FI_EP_MSG accepted:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Atomics where the domain is offered at all: every domain applies them,
    // but the host has no verbs device.
    for (forced, offered) in [("tcp", true), ("verbs", false), ("shm", true)] {
        let out = fi_command("fi_info")
            .args(["-p", "xfer", "-c", "FI_ATOMIC", "-v"])
            .env("XFER_PROVIDER", forced)
            .output()
            .expect("fi_info");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.success(), offered, "FI_ATOMIC over {forced}:\n{text}");
        if offered {
            assert!(
                text.contains(&format!("name: {forced}")) && text.contains("FI_ATOMIC"),
                "{text}"
            );
        }
    }
    // RMA when asked for, with the registration mode it needs.
    let out = fi_command("fi_info")
        .args(["-p", "xfer", "-c", "FI_RMA", "-v"])
        .output()
        .expect("fi_info");
    check("fi_info -p xfer -c FI_RMA", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["FI_RMA", "FI_REMOTE_WRITE", "FI_MR_VIRT_ADDR", "FI_MR_PROV_KEY"] {
        assert!(text.contains(want), "no {want}:\n{text}");
    }
}

/// Transport settings reach the xfer domain from `FI_XFER_<KEY>`, libfabric's
/// name for a parameter of the provider `xfer`: a value that does not parse
/// fails `fi_domain` with `-FI_EINVAL`, and the log names the key.
#[test]
fn fi_xfer_settings_reach_the_domain() {
    let domain = domain();
    let args = ["-p", "xfer", "-d", &domain, "-e", "rdm", "-m", "tagged", "-I", "2"];
    let (var, key) = match domain.as_str() {
        "shm" => ("FI_XFER_SHM_RING_BYTES", "shm.ring_bytes"),
        _ => ("FI_XFER_TCP_COALESCE", "tcp.coalesce"),
    };
    // The server opens its domain once a client reaches its control port;
    // the client then fails too (the server hung up).
    let (client, server) = run_pair(&args, &[(var, "lots")]);
    assert!(!client.status.success());
    let err = String::from_utf8_lossy(&server.stderr);
    assert!(!server.status.success(), "a bad {var} was accepted:\n{err}");
    assert!(err.contains("fi_domain") && err.contains("-22"), "{err}");
    assert!(err.contains(key), "the key is not named:\n{err}");
}

/// The shm domain is offered when it is the one chosen and never beside
/// the others (Open MPI would spread ranks over both): asked for by name
/// (`-d shm`), or forced by `FI_XFER_PROVIDER`, which wins over
/// `XFER_PROVIDER` as every `FI_XFER_*` variable wins over its twin.
#[test]
fn shm_is_offered_when_chosen() {
    let domains = |env: &[(&str, &str)], args: &[&str]| {
        let out = fi_command("fi_info")
            .env_remove("XFER_PROVIDER")
            .env_remove("FI_XFER_PROVIDER")
            .envs(env.iter().copied())
            .args(["-p", "xfer"])
            .args(args)
            .output()
            .expect("fi_info (libfabric-bin)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut d: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("domain: ").map(str::to_owned))
            .collect();
        d.dedup();
        d
    };
    let unasked = domains(&[], &[]);
    assert!(unasked.contains(&"shm+tcp".to_string()), "{unasked:?}");
    assert!(
        !unasked.contains(&"tcp".to_string()),
        "tcp listed beside shm+tcp: {unasked:?}"
    );
    // shm+tcp takes socket addresses too (its TCP side's); tcp alone when
    // named.
    assert_eq!(domains(&[], &["-a", "FI_SOCKADDR_IN"]), ["shm+tcp"]);
    assert_eq!(domains(&[], &["-d", "tcp"]), ["tcp"]);
    assert!(!unasked.contains(&"shm".to_string()), "shm listed unasked: {unasked:?}");
    assert_eq!(domains(&[], &["-d", "shm"]), ["shm"]);
    assert_eq!(domains(&[("FI_XFER_PROVIDER", "shm")], &[]), ["shm"]);
    assert_eq!(domains(&[("XFER_PROVIDER", "shm")], &[]), ["shm"]);
    assert_eq!(
        domains(&[("FI_XFER_PROVIDER", "shm"), ("XFER_PROVIDER", "tcp")], &[]),
        ["shm"]
    );
    assert!(domains(&[("XFER_PROVIDER", "shm")], &["-d", "tcp"]).is_empty());
}
