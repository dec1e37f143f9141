//! Every socket system call of the TCP provider, in one place. Everything
//! above this module is safe code.

use std::io::IoSlice;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::attr::TcpAttr;
use xfer_core::unstable::error::{Error, Result};
use xfer_core::unstable::sys::{cvt, errno};

use crate::iface::{IfAddr, Interface};

/// Unanswered keepalive probes before a connection is dead, when no user
/// timeout is set (with one, `TCP_USER_TIMEOUT` decides).
const KEEPALIVE_PROBES: i32 = 3;

/// A non-blocking, close-on-exec TCP socket.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
}

/// A system call with up to six arguments: its result, or the negated
/// `errno`. The hot `recv` of a busy-polling loop is made through it.
///
/// On x86-64 Linux the call is made here, inline, rather than through libc's
/// wrapper: a function whose frame spans a system call costs a mispredicted
/// return once the kernel has run (its return-address predictor entries are
/// gone after the kernel's entry mitigations; about 35 cycles a frame on
/// these machines, docs/PERFORMANCE.md "Call depth across the `recv`"), and
/// no `errno` is read.
///
/// # Safety
/// `nr` and `args` must make a valid system call whose memory accesses are
/// all to memory the caller lends it for the call.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[inline(always)]
unsafe fn syscall6(nr: libc::c_long, args: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux system call convention: number in rax,
    // arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11 clobbered; the
    // result in rax. What the call itself touches is the caller's contract.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// [`syscall6`] through libc where no inline form is written.
///
/// # Safety
/// As the x86-64 form.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
#[inline(always)]
unsafe fn syscall6(nr: libc::c_long, args: [usize; 6]) -> isize {
    // SAFETY: forwarded unchanged; the caller vouches for the call.
    let n = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]) };
    if n < 0 {
        -(errno() as isize)
    } else {
        n as isize
    }
}

/// A non-blocking transfer's result as [`Io`]: `n` bytes moved, or on a
/// negative `n` the failure whose number `errno` gives, where `EAGAIN` and
/// `EINTR` are "not ready". The one mapping of every transfer call (a raw
/// system call's negated result, or libc's [`errno`]).
#[inline(always)]
fn io_result(n: isize, errno: impl FnOnce() -> i32) -> Result<Io> {
    if n >= 0 {
        return Ok(Io::Done(n as usize));
    }
    match errno() {
        libc::EAGAIN | libc::EINTR => Ok(Io::WouldBlock),
        e => Err(Error::Os(e)),
    }
}

/// Result of a non-blocking transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Io {
    /// This many bytes moved (for a read, 0 means the peer closed).
    Done(usize),
    /// The socket is not ready.
    WouldBlock,
}

fn raw_addr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn from_raw_addr(storage: &libc::sockaddr_storage) -> Result<SocketAddr> {
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let s: libc::sockaddr_in6 = unsafe { std::ptr::read((storage as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        _ => Err(Error::NotSupported("address family")),
    }
}

impl Socket {
    fn new(addr: &SocketAddr) -> Result<Socket> {
        let family = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        let fd = cvt(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: socket() returned a fresh descriptor that nothing else owns.
        Ok(Socket {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// A listening socket bound to `addr` (port 0: ephemeral).
    pub fn listen(addr: &SocketAddr) -> Result<Socket> {
        let s = Socket::new(addr)?;
        s.set_int(libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        let (raw, len) = raw_addr(addr);
        // SAFETY: `raw` holds a valid socket address of length `len`.
        cvt(unsafe { libc::bind(s.fd.as_raw_fd(), (&raw as *const libc::sockaddr_storage).cast(), len) })?;
        cvt(unsafe { libc::listen(s.fd.as_raw_fd(), 1024) })?;
        Ok(s)
    }

    /// Starts connecting to `addr`; completion is signalled by writability,
    /// then [`Socket::take_error`] tells the outcome.
    pub fn connect(addr: &SocketAddr) -> Result<Socket> {
        let s = Socket::new(addr)?;
        let (raw, len) = raw_addr(addr);
        // SAFETY: `raw` holds a valid socket address of length `len`.
        match cvt(unsafe { libc::connect(s.fd.as_raw_fd(), (&raw as *const libc::sockaddr_storage).cast(), len) }) {
            Ok(_) | Err(Error::Os(libc::EINPROGRESS)) => Ok(s),
            Err(e) => Err(e),
        }
    }

    /// Accepts one pending connection, if any.
    pub fn accept(&self) -> Result<Option<Socket>> {
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: null address pointers ask accept4 not to report the peer.
        match cvt(unsafe { libc::accept4(self.fd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), flags) }) {
            // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
            Ok(fd) => Ok(Some(Socket {
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
            })),
            Err(Error::Os(libc::EAGAIN | libc::ECONNABORTED | libc::EINTR)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.addr_by(libc::getsockname)
    }

    /// The address of the connected peer.
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        self.addr_by(libc::getpeername)
    }

    /// The address `query` (`getsockname` or `getpeername`) reports.
    fn addr_by(
        &self,
        query: unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int,
    ) -> Result<SocketAddr> {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `storage` and `len` describe a writable buffer of that size,
        // and `query` writes at most `len` bytes there.
        cvt(unsafe {
            query(
                self.fd.as_raw_fd(),
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        })?;
        from_raw_addr(&storage)
    }

    /// Whether a connection to `peer` stays on this host: a loopback
    /// address, or the address the socket is bound to.
    fn same_host(&self, peer: &SocketAddr) -> bool {
        peer.ip().is_loopback() || self.local_addr().is_ok_and(|l| l.ip() == peer.ip())
    }

    /// An integer socket option's value.
    #[cfg(test)]
    fn get_int(&self, level: i32, name: i32) -> Result<i32> {
        let mut value: i32 = 0;
        let mut len = size_of::<i32>() as libc::socklen_t;
        // SAFETY: `value` and `len` describe a writable i32.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&mut value as *mut i32).cast(),
                &mut len,
            )
        })?;
        Ok(value)
    }

    fn set_int(&self, level: i32, name: i32, value: i32) -> Result<()> {
        let len = size_of::<i32>() as libc::socklen_t;
        // SAFETY: `value` is a valid i32 option value of length `len`.
        cvt(unsafe { libc::setsockopt(self.fd.as_raw_fd(), level, name, (&value as *const i32).cast(), len) }).map(drop)
    }

    /// Disables Nagle, and applies the user timeout, keepalive and buffer
    /// sizes of `attr` (0 keeps the kernel's value, or keepalive off) to a
    /// connection to `peer` (`None`: the connected peer's address). Without
    /// `sockbuf`, a connection that stays on this host gets a send buffer of
    /// `local_sndbuf` (decision 61).
    pub fn tune(&self, attr: &TcpAttr, peer: Option<SocketAddr>) -> Result<()> {
        self.set_int(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
        if attr.user_timeout_ms > 0 {
            self.set_int(
                libc::IPPROTO_TCP,
                libc::TCP_USER_TIMEOUT,
                attr.user_timeout_ms.min(i32::MAX as u64) as i32,
            )?;
        }
        if attr.keepalive_ms > 0 {
            // The kernel counts keepalive times in whole seconds, at most 32767.
            let secs = attr.keepalive_ms.div_ceil(1000).clamp(1, 32767) as i32;
            self.set_int(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
            self.set_int(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs)?;
            self.set_int(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs)?;
            // Used only without a user timeout, which otherwise decides.
            self.set_int(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_PROBES)?;
        }
        if attr.sockbuf > 0 {
            let size = attr.sockbuf.min(i32::MAX as usize) as i32;
            self.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, size)?;
            self.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, size)?;
        } else if attr.local_sndbuf > 0 {
            let peer = match peer {
                Some(p) => p,
                None => self.peer_addr()?,
            };
            if self.same_host(&peer) {
                let size = attr.local_sndbuf.min(i32::MAX as usize) as i32;
                self.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, size)?;
            }
        }
        Ok(())
    }

    /// The pending socket error (the outcome of a connect), 0 if none.
    pub fn take_error(&self) -> Result<i32> {
        let mut err: i32 = 0;
        let mut len = size_of::<i32>() as libc::socklen_t;
        // SAFETY: `err` and `len` describe a writable i32.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut i32).cast(),
                &mut len,
            )
        })?;
        Ok(err)
    }

    /// Starts an orderly close before the descriptor is dropped: sends our
    /// FIN (after what the send buffer holds), then reads and discards what
    /// already arrived, up to `budget` bytes. Closing a socket with unread
    /// bytes makes the kernel send a reset instead, which the peer would
    /// take for a failure; with the FIN out first it reads an end of file.
    pub fn close_in_order(&self, budget: usize) {
        // SAFETY: shutdown(2) on a descriptor we own; no memory is passed.
        if unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_WR) } != 0 {
            return; // not connected (any more): nothing to close in order
        }
        let mut sink = [0u8; 16 * 1024];
        let mut left = budget;
        while left > 0 {
            match self.recv(&mut sink) {
                Ok(Io::Done(n)) if n > 0 => left = left.saturating_sub(n),
                _ => return,
            }
        }
    }

    /// Reads into `buf` without blocking.
    #[inline(always)]
    pub fn recv(&self, buf: &mut [u8]) -> Result<Io> {
        let args = [
            self.fd.as_raw_fd() as usize,
            buf.as_mut_ptr() as usize,
            buf.len(),
            libc::MSG_DONTWAIT as usize,
            0, // no source address wanted
            0,
        ];
        // SAFETY: recvfrom(2) writes at most `buf.len()` bytes into `buf`,
        // valid and writable for that long; the null address asks for none.
        let n = unsafe { syscall6(libc::SYS_recvfrom, args) };
        io_result(n, || -n as i32)
    }

    /// Writes `buf` without blocking and without SIGPIPE.
    pub fn send_flat(&self, buf: &[u8]) -> Result<Io> {
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        // SAFETY: `buf` is valid for `buf.len()` readable bytes.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
        io_result(n, errno)
    }

    /// Writes the slices in order without blocking and without SIGPIPE.
    pub fn send(&self, bufs: &[IoSlice<'_>]) -> Result<Io> {
        // SAFETY: all-zero is a valid msghdr (no name, no control data).
        let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        // IoSlice is ABI-compatible with iovec (guaranteed by std on Unix).
        msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = bufs.len() as _;
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        // SAFETY: `msg` points at `bufs`, valid readable iovecs for the call.
        let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, flags) };
        io_result(n, errno)
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The host's interfaces with their IPv4 and IPv6 addresses, in the
/// kernel's order (by index), from `getifaddrs`; an interface without an
/// address is listed too.
pub fn interfaces() -> Result<Vec<Interface>> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `ifap` receives a list that we free below.
    cvt(unsafe { libc::getifaddrs(&mut ifap) })?;
    let mut out: Vec<Interface> = Vec::new();
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        let at = match out.iter().position(|i| i.name.as_bytes() == name.to_bytes()) {
            Some(at) => at,
            None => {
                let flags = ifa.ifa_flags;
                out.push(Interface {
                    name: name.to_string_lossy().into_owned(),
                    // SAFETY: `name` is a NUL-terminated interface name.
                    index: unsafe { libc::if_nametoindex(name.as_ptr()) },
                    up: flags & libc::IFF_UP as u32 != 0,
                    running: flags & libc::IFF_RUNNING as u32 != 0,
                    loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        // SAFETY: the address and netmask are null or sockaddrs of the node.
        if let Some(ip) = unsafe { ip_of(ifa.ifa_addr) } {
            // SAFETY: as above.
            let mask = unsafe { ip_of(ifa.ifa_netmask) };
            let prefix = match mask {
                Some(IpAddr::V4(m)) => m.to_bits().count_ones(),
                Some(IpAddr::V6(m)) => m.to_bits().count_ones(),
                None => 0,
            };
            out[at].addrs.push(IfAddr {
                ip,
                prefix: prefix as u8,
            });
        }
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(ifap) };
    Ok(out)
}

/// The IP address a `getifaddrs` sockaddr holds, when it is IPv4 or IPv6.
///
/// # Safety
/// `sa` must be null or point at a sockaddr whose length its family implies.
unsafe fn ip_of(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null, so a sockaddr by contract; the family comes first.
    match unsafe { (*sa).sa_family } as i32 {
        libc::AF_INET => {
            // SAFETY: the family is AF_INET, so the address is a sockaddr_in.
            let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
            Some(IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())))
        }
        libc::AF_INET6 => {
            // SAFETY: the family is AF_INET6, so the address is a sockaddr_in6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr_in6) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// Eight random bytes from the kernel.
pub fn random_u64() -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: `v` is a writable buffer of 8 bytes.
    let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), v.len(), 0) };
    if n != 8 {
        // Fall back on time and pid; uniqueness, not secrecy, is what matters.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64);
        return t.unwrap_or(0) ^ ((std::process::id() as u64) << 32);
    }
    u64::from_le_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The send buffer the kernel reports for both ends of a loopback
    /// connection tuned with `attr` (it doubles what was set).
    fn sndbufs(attr: &TcpAttr) -> (i32, i32) {
        let listener = Socket::listen(&"127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let out = Socket::connect(&addr).unwrap();
        out.tune(attr, Some(addr)).unwrap();
        let accepted = loop {
            if let Some(s) = listener.accept().unwrap() {
                break s;
            }
        };
        accepted.tune(attr, None).unwrap();
        let get = |s: &Socket| s.get_int(libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap();
        (get(&out), get(&accepted))
    }

    #[test]
    fn connections_within_the_host_get_the_local_send_buffer() {
        let mut attr = TcpAttr {
            local_sndbuf: 256 << 10,
            ..TcpAttr::default()
        };
        assert_eq!(sndbufs(&attr), (512 << 10, 512 << 10));
        let auto = TcpAttr {
            local_sndbuf: 0,
            ..TcpAttr::default()
        };
        let auto = sndbufs(&auto);
        assert!(auto.0 != 512 << 10 && auto.1 != 512 << 10, "autotuned: {auto:?}");
        // `sockbuf` wins over it.
        attr.sockbuf = 64 << 10;
        let both = sndbufs(&attr);
        assert_eq!(both, (128 << 10, 128 << 10));
    }

    #[test]
    fn interfaces_list_loopback_with_its_addresses() {
        let all = interfaces().unwrap();
        let lo = all.iter().find(|i| i.loopback).expect("a loopback interface");
        assert!(lo.up && lo.running && lo.index > 0, "{lo:?}");
        let v4 = lo.addrs.iter().find(|a| a.ip == IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(v4.map(|a| a.prefix), Some(8), "{lo:?}");
        let mut names: Vec<&str> = all.iter().map(|i| i.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "one entry per interface: {names:?}");
    }

    #[test]
    fn a_remote_address_is_not_on_this_host() {
        let s = Socket::listen(&"127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(s.same_host(&"127.0.0.1:9".parse().unwrap()));
        assert!(s.same_host(&"[::1]:9".parse().unwrap()));
        assert!(!s.same_host(&"192.0.2.1:9".parse().unwrap()));
    }
}
