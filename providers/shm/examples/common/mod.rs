//! What the two-process examples (`ring_pingpong`, `rma_bw`) share: the
//! command line, CPU pinning, and starting this binary again as the peer.

use std::process::{Child, Command};

/// Calls `f(flag, value)` for each `--flag VALUE` of `args`, and
/// `f(flag, "")` for each flag named in `switches` (they take no value).
pub fn each_opt(args: &[String], switches: &[&str], mut f: impl FnMut(&str, &str)) {
    let mut i = 0;
    while i < args.len() {
        if switches.contains(&args[i].as_str()) {
            f(&args[i], "");
            i += 1;
        } else {
            f(&args[i], args.get(i + 1).map_or("", String::as_str));
            i += 2;
        }
    }
}

/// `A,B`: the CPUs of the first process and of the peer.
pub fn cpus(v: &str) -> (usize, usize) {
    let (a, b) = v.split_once(',').expect("--cpus A,B");
    (a.parse().expect("cpu"), b.parse().expect("cpu"))
}

/// Pins this process to `cpu`; `who` names it in the complaint if it cannot.
pub fn pin(who: &str, cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes within it, and
    // sched_setaffinity reads it for the call.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        eprintln!("{who}: could not pin to CPU {cpu}");
    }
}

/// Starts this binary again as `--peer ADDR ARGS...`, ADDR being `addr`
/// in hex.
pub fn spawn_peer(addr: &[u8], args: &[String]) -> Child {
    let hex: String = addr.iter().map(|b| format!("{b:02x}")).collect();
    Command::new(std::env::current_exe().expect("exe"))
        .arg("--peer")
        .arg(hex)
        .args(args)
        .spawn()
        .expect("spawn peer")
}

/// The port address a peer was given in hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}
