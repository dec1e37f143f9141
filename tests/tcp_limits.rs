//! The TCP endpoint at its process's descriptor limit: a child process (this
//! binary again, `XFER_LIMIT_CHILD=1`) opens an endpoint, lowers its
//! `RLIMIT_NOFILE` and fills every descriptor left, then serves as a server
//! does (blocking waits on its completion queue) while clients keep
//! connecting. Its CPU time and its log stay bounded, the clients are
//! refused instead of waiting for their connect timeout, and once the child
//! frees descriptors a client's message is delivered.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::{hex, unhex, Node, DEADLINE};
use xfer::{Completion, Error};

const CHILD: &str = "XFER_LIMIT_CHILD";
/// The tag of the message sent once descriptors are free.
const AFTER: u64 = 7;
/// How long the parent watches the child at its limit.
const AT_LIMIT: Duration = Duration::from_secs(2);

/// The child's side (a no-op unless `XFER_LIMIT_CHILD` is set).
#[test]
fn descriptor_limit_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let node = Node::new();
    println!("LIMIT name {}", hex(node.ep.name().as_bytes()));
    node.ep
        .trecv(xfer::PeerAddr::UNSPEC, AFTER, 0, vec![0; 64], AFTER)
        .expect("trecv");
    // The parent's commands, read on a thread of their own (it needs no
    // descriptor once the limit is reached).
    let (tx, commands) = channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    let fillers = fill_descriptors();
    println!("LIMIT full {}", fillers.len());
    let mut fillers = Some(fillers);
    let mut buf = vec![Completion::EMPTY; 16];
    loop {
        if let Ok(cmd) = commands.try_recv() {
            assert_eq!(cmd, "free", "unknown command");
            fillers = None;
            println!("LIMIT freed");
        }
        let n = match node.cq.wait(&mut buf, Some(Duration::from_millis(100))) {
            Ok(n) => n,
            Err(Error::TimedOut) => 0,
            Err(e) => panic!("cq wait: {e}"),
        };
        if let Some(c) = buf[..n].iter().find(|c| c.context == AFTER) {
            c.result.clone().expect("the message after the limit");
            assert!(fillers.is_none(), "delivered while at the limit");
            let counters = node.ep.counters().expect("counters");
            let get = |name| counters.iter().find(|(k, _)| *k == name).map_or(0, |&(_, v)| v);
            println!(
                "LIMIT got {} paused {} shed {}",
                c.len,
                get("accept_paused"),
                get("accept_shed")
            );
            return;
        }
    }
}

/// Lowers the soft descriptor limit to a few above what is open and opens
/// `/dev/null` until none is left; the files hold the descriptors.
fn fill_descriptors() -> Vec<std::fs::File> {
    let open = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count() as u64;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for getrlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = open + 16;
    // SAFETY: `lim` is a valid rlimit; lowering the soft limit needs no privilege.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let mut files = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => files.push(f),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "filling descriptors");
                return files;
            }
        }
    }
}

/// The child: its stdin, its protocol lines and its stderr lines (counted).
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    log: Receiver<String>,
}

impl Server {
    fn spawn() -> Server {
        let mut child = Command::new(std::env::current_exe().expect("own test binary"))
            .args(["--exact", "descriptor_limit_child", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("XFER_PROVIDER", "tcp")
            .env("XFER_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let stdin = child.stdin.take().expect("stdin");
        let lines = pipe_lines(BufReader::new(child.stdout.take().expect("stdout")), Some("LIMIT "));
        let log = pipe_lines(BufReader::new(child.stderr.take().expect("stderr")), None);
        Server {
            child,
            stdin,
            lines,
            log,
        }
    }

    /// The child's next protocol line, which must start with `what`.
    fn expect(&self, what: &str) -> String {
        let line = self
            .lines
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("the child did not say {what:?}"));
        assert!(line.starts_with(what), "expected {what:?}, got {line:?}");
        line[what.len()..].trim().to_string()
    }

    /// Nanoseconds of CPU the child has used (user + system).
    fn cpu_ns(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).expect("child stat");
        // Fields after the command name (which may hold spaces): utime, stime are 14 and 15.
        let rest = &stat[stat.rfind(')').expect("stat") + 2..];
        let f: Vec<u64> = rest
            .split(' ')
            .skip(11)
            .take(2)
            .map(|v| v.parse().expect("ticks"))
            .collect();
        // SAFETY: sysconf has no memory-safety preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        (f[0] + f[1]) * 1_000_000_000 / hz
    }
}

/// The lines `r` yields (those starting with `prefix`, if given) on a channel.
fn pipe_lines(r: impl BufRead + Send + 'static, prefix: Option<&'static str>) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in r.lines().map_while(|l| l.ok()) {
            if let Some(p) = prefix {
                match line.find(p) {
                    Some(i) => {
                        let _ = tx.send(line[i..].to_string());
                    }
                    None => continue,
                }
            } else {
                let _ = tx.send(line);
            }
        }
    });
    rx
}

/// A new client sends a tagged message to `name`; its send's completion.
fn send_from_new_client(name: &[u8], tag: u64) -> Completion {
    let mut client = Node::on("tcp");
    let peer = client.av.insert(name).expect("av insert");
    client.ep.tsend(peer, tag, vec![tag as u8; 32], tag).expect("tsend");
    common::expect(&mut [&mut client], 0, tag)
}

#[test]
fn a_listener_at_its_descriptor_limit_stays_idle_and_recovers() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let mut server = Server::spawn();
    let name = unhex(&server.expect("LIMIT name"));
    server.expect("LIMIT full");
    // At the limit: clients keep connecting; each is refused (the child
    // cannot keep its connection) instead of waiting for its connect timeout.
    let (cpu0, start) = (server.cpu_ns(), Instant::now());
    let mut refused = 0;
    while start.elapsed() < AT_LIMIT {
        let c = send_from_new_client(&name, 1);
        assert!(
            c.result.is_err(),
            "a message was taken while the child had no descriptor"
        );
        refused += 1;
    }
    let (cpu, wall) = (server.cpu_ns() - cpu0, start.elapsed());
    let log: Vec<String> = server.log.try_iter().collect();
    eprintln!(
        "at the limit for {wall:?}: {refused} clients refused; the child used {} ms of CPU and wrote {} log lines",
        cpu / 1_000_000,
        log.len()
    );
    // A busy loop takes what it can of a core (16 % measured with its log
    // read through a pipe, more without); the child waits in epoll between
    // clients (0-10 ms measured).
    assert!(
        cpu < wall.as_nanos() as u64 / 20,
        "the child at its limit used {} ms of CPU in {wall:?}",
        cpu / 1_000_000
    );
    // One line a second per call site at most: a handful.
    assert!(
        log.len() < 20,
        "{} log lines at the limit:\n{}",
        log.len(),
        log.join("\n")
    );

    // Descriptors freed: the next client is served.
    writeln!(server.stdin, "free").expect("command the child");
    server.expect("LIMIT freed");
    let c = send_from_new_client(&name, AFTER);
    c.result.expect("the send after descriptors were freed");
    let got = server.expect("LIMIT got");
    let fields: Vec<u64> = got.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert_eq!(fields[0], 32, "the message's length ({got})");
    assert!(fields[1] >= 1, "the listener was never paused ({got})");
    assert!(fields[2] >= 1, "no waiting connection was refused ({got})");
    let status = server.child.wait().expect("wait for the child");
    assert!(status.success(), "the child failed: {status}");
}
