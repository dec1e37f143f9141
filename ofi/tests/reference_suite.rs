//! libfabric programs written the way such programs commonly are, each
//! run first over libfabric's own `tcp` provider (the reference:
//! `FI_PROVIDER=tcp`, `FI_TCP_IFACE=lo` so that its servers listen on
//! loopback) and then over xfer, which must pass; where the reference
//! fails the test says so and does not fail on it.
//!
//! - ofi/tests/c/fi_cs.c: a client and a server as separate processes
//!   (fi_getinfo with node, service and FI_SOURCE; info->dest_addr into the
//!   AV; names exchanged in band; clients in turn, a service in use, two
//!   servers, FI_SOCKADDR_IN);
//! - fi_hints.c: what fi_getinfo answers to common hints;
//! - fi_wait.c: event queues, wait sets, poll sets, wait fds;
//! - fi_iov.c: messages of several buffers;
//! - fi_multi.c: multi-receive buffers;
//! - fi_rma.c: RMA with counters and remote CQ data;
//! - fi_source_err.c: `FI_SOURCE_ERR`, the address of an unknown sender;
//! - fi_auth.c: `auth_key` as xfer's job key, and xfer's progress timeout
//!   option (`ofi/include/fi_ext_xfer.h`);
//! - fi_complete.c: completion levels (`FI_TRANSMIT_COMPLETE`,
//!   `FI_DELIVERY_COMPLETE`).
//! - fi_rma_event.c: remote counters (`FI_RMA_EVENT`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{check, fi_command, free_port, wait_output};

/// How long one process may take.
const LIMIT: Duration = Duration::from_secs(60);

/// The two providers every scenario runs over.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Prov {
    Tcp,
    Xfer,
}

/// ofi/tests/c/`name`.c compiled into target/<profile>/ofi-test/ofi_`name`,
/// once per test binary (tests of one program run in parallel: a second
/// compilation would rewrite the file under a running one).
fn compile(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let exe = compile_now(name);
    built.push((name.to_string(), exe.clone()));
    exe
}

fn compile_now(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let exe = common::provider_dir().join(format!("ofi_{name}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-O1", "-g", "-pthread"])
        .arg(format!("-I{}/include", env!("CARGO_MANIFEST_DIR")))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lfabric")
        .output()
        .expect("running the C compiler");
    check(&format!("compiling {name}.c (needs libfabric-dev)"), &out);
    exe
}

/// fi_cs.c compiled once.
fn exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile("fi_cs"))
}

/// fi_cs with `args` over `prov`.
fn fi_cs(prov: Prov, args: &[&str]) -> Command {
    let mut cmd = on(prov, exe());
    cmd.args(args);
    cmd
}

/// `exe` with the environment that selects `prov`.
fn on(prov: Prov, exe: &Path) -> Command {
    let mut cmd = fi_command(exe.to_str().expect("utf-8 path"));
    if prov == Prov::Tcp {
        cmd.env("FI_PROVIDER", "tcp").env("FI_TCP_IFACE", "lo");
    }
    cmd
}

/// A server process whose stdout is read line by line.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Server {
    /// Starts `fi_cs server PORT N` (with `extra` arguments) and waits for
    /// its "ready" line.
    fn start(prov: Prov, port: u16, clients: usize, extra: &[&str]) -> Result<Server, String> {
        let (port, clients) = (port.to_string(), clients.to_string());
        let mut args = vec!["server", &port, &clients];
        args.extend(extra);
        let mut child = fi_cs(prov, &args)
            .spawn()
            .map_err(|e| format!("spawning the server: {e}"))?;
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            lines,
            seen: Vec::new(),
        };
        s.wait_line("ready")?;
        Ok(s)
    }

    /// Waits for a stdout line equal to `want`.
    fn wait_line(&mut self, want: &str) -> Result<(), String> {
        let end = Instant::now() + LIMIT;
        while !self.seen.iter().any(|l| l == want) {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => return Err(self.fail(&format!("no line '{want}'"))),
            }
        }
        Ok(())
    }

    /// Kills the server and describes what it printed.
    fn fail(&mut self, why: &str) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        format!("server: {why}; stdout {:?}, stderr:\n{err}", self.seen)
    }

    /// Waits for the server to print `served N clients` and exit 0.
    fn finish(mut self, clients: usize) -> Result<(), String> {
        self.wait_line(&format!("served {clients} clients"))?;
        let end = Instant::now() + LIMIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => return Err(self.fail(&format!("exited {s}"))),
                _ if Instant::now() > end => return Err(self.fail("did not exit")),
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Server {
    /// A scenario that failed leaves no server behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs fi_cs with `args` to its end; Err with its output unless it exits 0.
fn run(prov: Prov, what: &str, args: &[&str]) -> Result<Output, String> {
    let child = fi_cs(prov, args).spawn().map_err(|e| format!("spawning {what}: {e}"))?;
    let out = wait_output(child, what, LIMIT);
    match out.status.success() {
        true => Ok(out),
        false => Err(format!(
            "{what} exited {}:\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// A client of the server on `port` (with `extra` arguments).
fn client_with(prov: Prov, port: u16, id: usize, extra: &[&str]) -> Result<Output, String> {
    let (port, id_s) = (port.to_string(), id.to_string());
    let mut args = vec!["client", "127.0.0.1", &port, &id_s];
    args.extend(extra);
    let out = run(prov, &format!("client {id}"), &args)?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.contains(&format!("client {id} done")) {
        true => Ok(out),
        false => Err(format!("client {id}: {text}")),
    }
}

/// A client of the server on `port`.
fn client(prov: Prov, port: u16, id: usize) -> Result<Output, String> {
    client_with(prov, port, id, &[])
}

/// Runs `scenario` over tcp, then over xfer: xfer must pass; a tcp failure
/// is reported (the reference does not decide the test).
fn both(name: &str, scenario: impl Fn(Prov) -> Result<(), String>) {
    match scenario(Prov::Tcp) {
        Ok(()) => eprintln!("{name}: passes over libfabric's tcp provider"),
        Err(e) => eprintln!("{name}: FAILS over libfabric's tcp provider (reference):\n{e}"),
    }
    if let Err(e) = scenario(Prov::Xfer) {
        panic!("{name} over xfer:\n{e}");
    }
}

/// A server at `fi_getinfo(NULL, PORT, FI_SOURCE)` serves three clients
/// one after another, each found by `fi_getinfo("127.0.0.1", PORT, 0)`:
/// the receive for the next client's name is posted with the leaving
/// client's address as source (ignored: FI_DIRECTED_RECV was not asked
/// for) and must survive that client's exit; unexpected tagged messages
/// arrive in order; a cancelled receive reports FI_ECANCELED.
#[test]
fn clients_in_turn_against_one_server() {
    both("clients_in_turn", |prov| {
        let port = free_port();
        let server = Server::start(prov, port, 3, &[])?;
        for id in 1..=3 {
            client(prov, port, id)?;
        }
        server.finish(3)
    });
}

/// The same with `FI_SOCKADDR_IN` addresses on both sides: `src_addr` and
/// `dest_addr` are `sockaddr_in`s of the port, `fi_av_straddr` prints
/// `fi_sockaddr_in://127.0.0.1:PORT`, the client reaches the server through
/// `fi_av_insertsvc`, and the server answers each client at the
/// `sockaddr_in` its `fi_getname` gave.
#[test]
fn clients_in_turn_with_sockaddr_in() {
    both("clients_in_turn_sockaddr_in", |prov| {
        let port = free_port();
        let server = Server::start(prov, port, 2, &["in"])?;
        for id in 1..=2 {
            client_with(prov, port, id, &["in"])?;
        }
        server.finish(2)
    });
}

/// The same with `FI_ADDR_STR` addresses on both sides: `src_addr` and
/// `dest_addr` are strings naming the port, `fi_av_insert` takes arrays of
/// strings, `fi_av_straddr` gives the string back and `fi_av_insertsvc`
/// takes it as node without a service.
#[test]
fn clients_in_turn_with_address_strings() {
    both("clients_in_turn_addr_str", |prov| {
        let port = free_port();
        let server = Server::start(prov, port, 2, &["str"])?;
        for id in 1..=2 {
            client_with(prov, port, id, &["str"])?;
        }
        server.finish(2)
    });
}

/// Names exchanged out of band, as fi_pingpong and Open MPI do: the
/// server takes an ephemeral port (service "0") and prints its
/// `fi_getname` in hex; two clients in turn get it on their command line
/// and `fi_av_insert` it, with no node or service.
#[test]
fn clients_in_turn_with_out_of_band_names() {
    both("out_of_band", |prov| {
        let mut server = Server::start(prov, 0, 2, &[])?;
        let name = server
            .seen
            .iter()
            .find_map(|l| l.strip_prefix("name "))
            .ok_or("no name line")?
            .to_string();
        for id in 1..=2 {
            let id_s = id.to_string();
            let out = run(prov, &format!("client {id}"), &["client", "-", &name, &id_s])?;
            if !String::from_utf8_lossy(&out.stdout).contains(&format!("client {id} done")) {
                return Err(server.fail(&format!("client {id} did not finish")));
            }
        }
        server.finish(2)
    });
}

/// A second server on a service in use fails with `-FI_EADDRINUSE` (at
/// whichever call opens the listener), and the first goes on serving.
#[test]
fn service_in_use_is_a_clear_error() {
    both("service_in_use", |prov| {
        let port = free_port();
        let server = Server::start(prov, port, 1, &[])?;
        let out = run(prov, "second server", &["inuse", &port.to_string()])?;
        eprintln!("{prov:?}: {}", String::from_utf8_lossy(&out.stdout).trim());
        client(prov, port, 1)?;
        server.finish(1)
    });
}

/// Two servers on one host with different services, each with its client,
/// all four processes at once.
#[test]
fn two_servers_on_different_services() {
    both("two_servers", |prov| {
        let (a, b) = (free_port(), free_port());
        let sa = Server::start(prov, a, 1, &[])?;
        let sb = Server::start(prov, b, 1, &[])?;
        let ca = std::thread::spawn(move || client(prov, a, 1).map(drop));
        client(prov, b, 2)?;
        ca.join().map_err(|_| "client thread panicked".to_string())??;
        sa.finish(1)?;
        sb.finish(1)
    });
}

/// ofi/tests/c/fi_hints.c: capabilities as asked (no `FI_DIRECTED_RECV`
/// added), `FI_MR_BASIC` returned as asked with RMA, `src_addr` from node
/// and service with `FI_SOURCE` (and from a service alone), `dest_addr`
/// without it, and `fi_getname` of the endpoint opened from the source
/// fi_info at that address, in `FI_SOCKADDR_IN`.
#[test]
fn hints_are_answered_as_asked() {
    let exe = compile("fi_hints");
    both("hints", |prov| {
        let port = free_port().to_string();
        one_program(prov, &exe, &[&port], &["all hints checked"])
    });
}

/// ofi/tests/c/fi_wait.c: an EQ with `FI_WAIT_FD` (`fi_eq_write`,
/// `FI_GETWAIT`, `FI_PEEK`, `fi_eq_sread` timing out and woken by another
/// thread), a wait set holding a CQ (`fi_wait` times out, then returns
/// once a message arrived), a poll set (`fi_poll` reports the CQ's
/// context), and a counter's `FI_GETWAIT` fd after `fi_trywait` (which
/// libfabric's tcp does not offer: required over xfer only).
#[test]
fn event_queues_and_waiting() {
    let exe = compile("fi_wait");
    both("waits", |prov| {
        let mut want = vec![
            "event queue checked",
            "wait set checked",
            "poll set checked",
            "all waits checked",
        ];
        if prov == Prov::Xfer {
            want.push("counter wait checked");
        }
        one_program(prov, &exe, &[], &want)
    });
}

/// Runs `exe` with `args` over `prov`: Ok when it exits 0 having printed
/// every line of `want`.
fn one_program(prov: Prov, exe: &Path, args: &[&str], want: &[&str]) -> Result<(), String> {
    let mut cmd = on(prov, exe);
    cmd.args(args);
    let out = wait_output(cmd.spawn().map_err(|e| e.to_string())?, "the program", LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    match out.status.success() && want.iter().all(|w| text.lines().any(|l| l == *w)) {
        true => Ok(()),
        false => Err(format!(
            "exit {}, wanted {want:?}\nstdout:\n{text}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// ofi/tests/c/fi_iov.c: `iov_limit` of at least 3 both ways; `fi_sendv`
/// of two buffers into `fi_recvv` of three and `fi_tsendmsg` of three into
/// `fi_trecvmsg` of two (bytes in order across the buffers, the total
/// length, tag and context); a truncated `fi_recvv` (`FI_ETRUNC`, nothing
/// written past the buffers; over xfer `len` 8 scattered and `olen` 4); a
/// cancelled `fi_recvv` (`FI_ECANCELED` with its context).
#[test]
fn messages_of_several_buffers() {
    let exe = compile("fi_iov");
    both("iov", |prov| {
        let want = [
            "sendv into recvv checked",
            "tsendmsg into trecvmsg checked",
            "truncated recvv checked",
            "cancelled recvv checked",
            "all vectors checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}

/// ofi/tests/c/fi_multi.c: `FI_MULTI_RECV` offered; `FI_OPT_MIN_MULTI_RECV`
/// set to 100 and read back; one 1024-byte buffer posted with
/// `fi_recvmsg(FI_MULTI_RECV)` takes eleven 90-byte messages, each reported
/// with the buffer's context, its length and `buf` where it landed (inside
/// the buffer, after the previous one, its bytes intact), and is released
/// (`FI_MULTI_RECV`) with the eleventh, when less than 100 bytes are left;
/// a second buffer, cancelled, reports `FI_ECANCELED` with its context.
#[test]
fn multi_receive_buffers() {
    let exe = compile("fi_multi");
    both("multi_recv", |prov| {
        let want = [
            "multi-receive buffer checked",
            "cancelled multi-receive checked",
            "all multi-receives checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}

/// ofi/tests/c/fi_complete.c: `FI_DELIVERY_COMPLETE` in `tx_attr->op_flags`
/// offered as asked; a send with it as the default, and a 1 MiB one with
/// it as a `fi_tsendmsg` flag, to receives posted first: when the send
/// completes, the bytes are in the receive's buffer (fi_cq(3));
/// `fi_sendmsg` with `FI_TRANSMIT_COMPLETE` and an empty `fi_tsendmsg` with
/// `FI_DELIVERY_COMPLETE` complete, their messages received.
#[test]
fn completion_levels() {
    let exe = compile("fi_complete");
    both("completion_levels", |prov| {
        let want = [
            "delivery complete offered",
            "delivery complete by default checked",
            "delivery complete 1 MiB checked",
            "transmit complete checked",
            "empty delivery complete checked",
            "all completion levels checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}

/// ofi/tests/c/fi_rma_event.c: `FI_RMA_EVENT` offered; on the target, a
/// counter bound for `FI_REMOTE_WRITE` counts two `fi_write`, an
/// `fi_inject_write` and an `fi_writedata` (1 to 4, `fi_cntr_wait` driving
/// it) and one for `FI_REMOTE_READ` two `fi_read`, each leaving the other
/// counter alone; the target's CQ gets only the `fi_writedata`'s entry. A
/// counter bound to a second region (`fi_mr_bind` with `FI_REMOTE_WRITE |
/// FI_REMOTE_READ`) counts the write, read and writedata into that region
/// and not a write into the first; bad bind flags refused; the counter
/// cannot close while the region is open.
#[test]
fn remote_counters() {
    let exe = compile("fi_rma_event");
    both("remote_counters", |prov| {
        let want = [
            "remote writes counted",
            "remote reads counted",
            "target queue checked",
            "region counter checked",
            "all rma events checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}

/// fi_wait.c, fi_iov.c, fi_multi.c, fi_rma.c, fi_source_err.c, fi_auth.c, fi_complete.c
/// and fi_rma_event.c over xfer under valgrind memcheck
/// (as `c_suite_under_valgrind`): the staged and multi-receive buffers, the
/// EQ, wait and poll sets, and the `auth_key`s fi_getinfo copies (freed by
/// fi_freeinfo) make no invalid access and leak nothing. Skipped
/// without valgrind unless `XFER_REQUIRE_VALGRIND` is set.
#[test]
fn waits_vectors_and_multi_receives_under_valgrind() {
    if !Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(
            std::env::var_os("XFER_REQUIRE_VALGRIND").is_none(),
            "XFER_REQUIRE_VALGRIND is set but valgrind is not installed"
        );
        eprintln!("valgrind not installed: the memcheck runs are skipped");
        return;
    }
    let supp = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/valgrind.supp");
    for name in [
        "fi_wait",
        "fi_iov",
        "fi_multi",
        "fi_rma",
        "fi_source_err",
        "fi_auth",
        "fi_complete",
        "fi_rma_event",
    ] {
        let exe = compile(name);
        let mut cmd = fi_command("valgrind");
        cmd.args([
            "--tool=memcheck",
            "--error-exitcode=1",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--keep-debuginfo=yes",
        ])
        .arg(format!("--suppressions={}", supp.display()))
        .arg(&exe)
        // fi_auth's 500 ms progress timeout is too short for a handshake
        // under memcheck beside other work (seen once in CI).
        .env("FI_AUTH_TIMEOUT_MS", "5000");
        let out = wait_output(cmd.spawn().expect("running valgrind"), name, Duration::from_secs(600));
        check(&format!("{name} under valgrind"), &out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ERROR SUMMARY: 0 errors"), "{name}: {stderr}");
    }
}

/// ofi/tests/c/fi_rma.c: `FI_RMA` with `FI_MR_LOCAL` descriptors and the
/// registration mode each provider returns (virtual addresses or offsets);
/// `fi_write`, `fi_read` and `fi_writedata` of 1000 bytes with a write and
/// a read counter on the initiator, the bytes landing in the target's
/// memory (the target driven by `fi_cq_read(cq, NULL, 0)`), and the
/// target's CQ getting `FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA` with the data;
/// `fi_writev`, `fi_readv` and `fi_readmsg` of several local buffers (the
/// bytes in order across them, the counters); `fi_writemsg` with
/// `FI_REMOTE_CQ_DATA` from two local buffers into three remote segments
/// (one target entry with the data, by which every segment has its bytes;
/// one completion, counted once) and `fi_readmsg` of them back; more
/// `fi_inject_writedata` and `fi_writemsg` with `FI_REMOTE_CQ_DATA` (one
/// target entry each, no context, the bytes in place); more
/// remote segments than `rma_iov_limit` refused with `-FI_EINVAL`
/// (libfabric 1.17's tcp accepts them: its reference run fails there).
#[test]
fn rma_with_counters() {
    let exe = compile("fi_rma");
    both("rma", |prov| {
        let want = [
            "write checked",
            "read checked",
            "writedata checked",
            "writev checked",
            "readv checked",
            "readmsg checked",
            "segmented writemsg checked",
            "segmented readmsg checked",
            "remote cq data checked",
            "rma_iov_limit checked",
            "all rma checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}

/// ofi/tests/c/fi_source_err.c: `FI_SOURCE | FI_SOURCE_ERR` offered with a
/// `max_err_data` that holds an address; a message from a sender not in the
/// receiver's AV is an error entry (`FI_EADDRNOTAVAIL`, `FI_RECV`, the
/// receive's context and length, the bytes delivered) whose `err_data` is
/// the sender's address, in the provider's buffer or copied into the
/// application's; inserted, the next message from it succeeds with that
/// `fi_addr` as `fi_cq_readfrom`'s source; a multi-receive buffer takes two
/// messages from an unknown sender (two such entries, each with where it
/// landed) without being released.
#[test]
fn unknown_sender_address_with_source_err() {
    let exe = compile("fi_source_err");
    both("source_err", |prov| {
        let want = [
            "capabilities checked",
            "unknown sender's address checked",
            "inserted sender checked",
            "application's err_data buffer checked",
            "multi-receive buffer checked",
            "all source_err checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}

/// ofi/tests/c/fi_auth.c: `auth_key` in `domain_attr` and `ep_attr` comes
/// back from `fi_getinfo` as asked; a server whose domain has a key serves
/// clients with that key (in their domain's attributes, or in their
/// endpoint's over another domain key) and refuses, with error completions
/// and nothing delivered, a client with another key and one with none;
/// `FI_OPT_XFER_PROGRESS_TIMEOUT_MS` is read back as set, refused at the
/// wrong size and after `fi_enable`, and with 500 ms a rendezvous send to a
/// server that is no longer driven fails with `FI_ETIMEDOUT`. libfabric's
/// tcp has no authorization keys (its `fi_getinfo` refuses them) and no such
/// option, so only xfer runs it through.
#[test]
fn auth_keys_and_the_progress_timeout_option() {
    let exe = compile("fi_auth");
    both("auth", |prov| {
        let want = [
            "admission checked",
            "option checked",
            "progress timeout checked",
            "all auth checked",
        ];
        one_program(prov, &exe, &[], &want)
    });
}
