//! Every system call of the shared-memory machinery, in one place: memfd and
//! its seals, the shared mapping, eventfd, Unix `SOCK_SEQPACKET` sockets with
//! `SCM_RIGHTS` and `SO_PEERCRED`, epoll, and cross-memory attach. Everything
//! above this module is safe code apart from the ring's accesses to the
//! mapping (ring.rs).

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// Turns a libc `-1` into the thread's `errno` as an `io::Error`.
fn cvt(res: libc::c_int) -> io::Result<libc::c_int> {
    if res == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(res)
    }
}

/// Wraps a fresh descriptor returned by a successful call.
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: the call just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A sealable, close-on-exec memfd of `len` bytes, zero-filled.
pub fn memfd(len: usize) -> io::Result<OwnedFd> {
    let name = c"xfer-shm";
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let fd = owned(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) })?;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain call on a descriptor we own.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    Ok(fd)
}

/// Seals that keep a mapping of the memfd from ever faulting: its size is
/// fixed for good.
pub const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// Adds `seals` to a memfd.
pub fn add_seals(fd: &OwnedFd, seals: libc::c_int) -> io::Result<()> {
    // SAFETY: plain fcntl on a descriptor we own.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) }).map(drop)
}

/// The seals of a memfd (an error for a descriptor that cannot have any).
pub fn seals(fd: &OwnedFd) -> io::Result<libc::c_int> {
    // SAFETY: plain fcntl on a descriptor we own.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })
}

/// The size of the file behind `fd`.
pub fn file_size(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: `st` is a plain C struct that fstat fills in; all-zero is valid.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: `st` is writable and lives across the call.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    u64::try_from(st.st_size).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// A shared read-write mapping of a whole memfd, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; who touches it, and how, is governed
// by the ring code's atomics, not by the owning thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared, readable and writable.
    pub fn new(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel; it aliases no Rust
        // object. The caller checked the file is at least `len` bytes and
        // sealed against shrinking, so no access within it can fault.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing uses
        // the mapping after its owner is dropped (rings borrow the owner).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain call; the result is checked.
    owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })
}

/// Adds one to an eventfd's counter (a wake-up). A full counter (EAGAIN)
/// already wakes its reader, so it is not an error.
pub fn eventfd_signal(fd: RawFd) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes the 8 bytes of `one`, which lives across the call.
    let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    if n == 8 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(())
    } else {
        Err(e)
    }
}

/// Resets an eventfd's counter to zero.
pub fn eventfd_drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into `v`, which lives across the call;
    // EAGAIN (already zero) is the expected failure and ignored.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// A `sockaddr_un` for an abstract-namespace name (no file, gone with its
/// socket, scoped to the network namespace), and its length.
fn abstract_addr(name: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sa: libc::sockaddr_un = unsafe { zeroed() };
    if name.is_empty() || name.len() >= sa.sun_path.len() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace.
    for (d, s) in sa.sun_path[1..].iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((sa, len as libc::socklen_t))
}

/// A non-blocking, close-on-exec `SOCK_SEQPACKET` Unix socket.
fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain call; the result is checked.
    owned(unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })
}

/// A listening socket bound to the abstract name `name`.
pub fn listen(name: &[u8]) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (sa, len) = abstract_addr(name)?;
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes, alive across the call.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), (&sa as *const libc::sockaddr_un).cast(), len) })?;
    // SAFETY: plain call on a socket we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), libc::SOMAXCONN) })?;
    Ok(fd)
}

/// Accepts one pending connection (non-blocking, close-on-exec), or `None`.
pub fn accept(listener: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: no address is asked for; the result is checked.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    match owned(fd) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Connects to the listener named `name`. Unix sockets connect at once or
/// fail (EAGAIN: the listener's backlog is full).
pub fn connect(name: &[u8]) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (sa, len) = abstract_addr(name)?;
    // SAFETY: `sa` is a valid sockaddr_un of `len` bytes, alive across the call.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), (&sa as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 2;

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Cmsg([u8; 64]);

/// Sends one message with `fds` attached (`SCM_RIGHTS`).
pub fn send_with_fds(sock: &OwnedFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut _,
        iov_len: bytes.len(),
    };
    let mut cbuf = Cmsg([0; 64]);
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    if !fds.is_empty() {
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is pure arithmetic.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
        // SAFETY: `msg` points at `cbuf`, which holds CMSG_SPACE(fd_bytes)
        // (at most 24 bytes for two descriptors) and is aligned for cmsghdr;
        // CMSG_FIRSTHDR and CMSG_DATA stay within it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
        }
    }
    // SAFETY: `msg` and everything it points to live across the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != bytes.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// One received message: its length (0: the peer closed), the descriptors
/// it carried, and whether the kernel cut it or its descriptors short.
#[derive(Debug)]
pub struct Received {
    /// Bytes of the message in the caller's buffer.
    pub len: usize,
    /// Descriptors that came with it, owned now.
    pub fds: Vec<OwnedFd>,
    /// The message or its control data did not fit.
    pub truncated: bool,
}

/// Receives one message and its descriptors; `None` when none is waiting.
pub fn recv_with_fds(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<Received>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = Cmsg([0; 64]);
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len();
    // SAFETY: `msg` and the buffers it points to live across the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `cbuf` with `msg_controllen` bytes of
    // well-formed control messages; the CMSG_* macros walk only those.
    // Every descriptor received is taken into an OwnedFd (closed if unused),
    // so a peer cannot leak descriptors into this process.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let truncated = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok(Some(Received {
        len: n as usize,
        fds,
        truncated,
    }))
}

/// Who is at the other end of a Unix socket, as the kernel saw it at
/// connect time (`SO_PEERCRED`): pid (in this pid namespace), uid, gid.
pub fn peer_cred(sock: &OwnedFd) -> io::Result<libc::ucred> {
    // SAFETY: all-zero is a valid ucred.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is writable for `len` bytes across the call.
    cvt(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(cred)
}

/// An epoll instance, level-triggered; its descriptor is the port's wait
/// descriptor.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// A new, close-on-exec epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain call; the result is checked.
        Ok(Epoll {
            fd: owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?,
        })
    }

    /// Watches `fd` for input and hang-up, reporting `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: token,
        };
        // SAFETY: `ev` lives across the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: plain call; a descriptor not in the set is harmless (ENOENT).
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    /// Waits up to `timeout_ms` (-1: forever, 0: not at all) and returns
    /// the ready tokens in `out` (cleared first). EINTR counts as no event.
    pub fn wait(&self, out: &mut Vec<u64>, timeout_ms: i32) -> io::Result<()> {
        out.clear();
        // SAFETY: all-zero epoll_events are valid.
        let mut evs: [libc::epoll_event; 32] = unsafe { zeroed() };
        // SAFETY: `evs` is writable for 32 entries across the call.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), evs.as_mut_ptr(), 32, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(evs[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }

    /// The epoll descriptor.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Reads `local.len()` bytes at `remote` in process `pid` into `local`
/// (`process_vm_readv`); the number of bytes read, short only when the
/// remote range ends in unmapped memory.
pub fn vm_read(pid: libc::pid_t, remote: u64, local: &mut [u8]) -> io::Result<usize> {
    let l = libc::iovec {
        iov_base: local.as_mut_ptr().cast(),
        iov_len: local.len(),
    };
    let r = libc::iovec {
        iov_base: remote as usize as *mut libc::c_void,
        iov_len: local.len(),
    };
    // SAFETY: the kernel writes at most `local.len()` bytes into `local`,
    // which is exclusively borrowed across the call; the remote address is
    // only interpreted in the other process, by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid, &l, 1, &r, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Writes `local` to `remote` in process `pid` (`process_vm_writev`); the
/// number of bytes written.
pub fn vm_write(pid: libc::pid_t, remote: u64, local: &[u8]) -> io::Result<usize> {
    let l = libc::iovec {
        iov_base: local.as_ptr() as *mut libc::c_void,
        iov_len: local.len(),
    };
    let r = libc::iovec {
        iov_base: remote as usize as *mut libc::c_void,
        iov_len: local.len(),
    };
    // SAFETY: the kernel only reads `local`, borrowed across the call; the
    // remote range belongs to the other process and the kernel checks it.
    let n = unsafe { libc::process_vm_writev(pid, &l, 1, &r, 1, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// 64 random bits from the kernel.
/// 64 unguessable bits for a key that guards memory: from `getrandom`, or
/// `/dev/urandom` where the call is missing; an error, never a weaker
/// value, when neither works.
pub fn secure_random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most `8 - got` bytes into `b[got..]`, alive across the call.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n > 0 {
            got += n as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOSYS) | Some(libc::EPERM) => {
                use std::io::Read;
                std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
                return Ok(u64::from_ne_bytes(b));
            }
            _ => return Err(e),
        }
    }
    Ok(u64::from_ne_bytes(b))
}

pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: writes at most 8 bytes into `v`, alive across the call.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        // No entropy source: the pid and the clock still make names and
        // probe values distinct between processes.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ (u64::from(std::process::id()) << 32);
    }
    v
}

/// Makes a descriptor non-blocking (one a peer sent: a write to it must
/// never block this process, whatever file it really is).
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain fcntl calls on a descriptor we own.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// This process's effective uid.
pub fn euid() -> libc::uid_t {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `fd` is an eventfd (its `/proc/self/fd` link names the eventfd
/// anonymous inode). A peer's wake-up descriptor must be one: a write to a
/// pipe whose reader is gone would raise SIGPIPE in this process.
pub fn is_eventfd(fd: &OwnedFd) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|p| p.as_os_str() == "anon_inode:[eventfd]")
}

/// Whether process `pid` can no longer run: gone (ESRCH) or a zombie
/// waiting to be reaped. A process that stopped (SIGSTOP) still counts as
/// running: it may resume.
pub fn process_gone(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks the process exists.
    if unsafe { libc::kill(pid, 0) } == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    // The state follows the command name's closing parenthesis.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_is_recognised() {
        assert!(is_eventfd(&eventfd().unwrap()));
        assert!(!is_eventfd(&memfd(4096).unwrap()));
        let mut p = [0; 2];
        // SAFETY: `p` has room for the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: pipe2 just returned these two descriptors; nothing else owns them.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        assert!(!is_eventfd(&r) && !is_eventfd(&w));
    }

    #[test]
    fn a_dead_process_is_gone_and_a_zombie_too() {
        assert!(!process_gone(std::process::id() as libc::pid_t));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as libc::pid_t;
        // Exited but not reaped: a zombie, which can no longer copy.
        let t0 = std::time::Instant::now();
        while !process_gone(pid) {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "the child never ended"
            );
            std::thread::yield_now();
        }
        child.wait().unwrap();
        assert!(process_gone(pid));
    }
}
