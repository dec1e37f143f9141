//! The system calls core needs, each in one place: an epoll set for the
//! completion queue's wait descriptor, and the kernel's random bytes for
//! secrets. Providers use them too.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};

/// A libc return value that signals failure with `-1` and `errno`.
pub trait MinusOne: Copy + PartialEq {
    /// The failure value.
    const MINUS_ONE: Self;
}

impl MinusOne for i32 {
    const MINUS_ONE: Self = -1;
}

impl MinusOne for isize {
    const MINUS_ONE: Self = -1;
}

/// The calling thread's `errno`: the number of the last failed system call.
#[inline]
pub fn errno() -> i32 {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for the thread's lifetime. Read directly: the `std::io::Error`
    // round trip cost a construction and a drop on every `EAGAIN` of a busy
    // poll.
    unsafe { *libc::__errno_location() }
}

/// Turns a libc call's `-1` into [`Error::Os`] with `errno`; every other
/// value is returned as is.
pub fn cvt<T: MinusOne>(res: T) -> Result<T> {
    if res == T::MINUS_ONE {
        Err(Error::last_os_error())
    } else {
        Ok(res)
    }
}

/// An epoll instance; its descriptor is itself pollable, so sets nest.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// Readiness for reading (and peer hang-up, which reads as end of file).
pub const READABLE: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
/// Readiness for writing.
pub const WRITABLE: u32 = libc::EPOLLOUT as u32;

impl Epoll {
    /// A new, empty, close-on-exec epoll set.
    pub fn new() -> Result<Epoll> {
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: epoll_create1 returned a fresh descriptor that nothing else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Watches `fd` for `events`, reporting `token`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes the events watched on `fd`.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) -> Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (0: do not block, -1: forever) and fills
    /// `events`; returns how many are ready. An interrupted wait returns 0.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> Result<usize> {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: `events` is valid for `max` writable entries.
        match cvt(unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) }) {
            Ok(n) => Ok(n as usize),
            Err(Error::Os(libc::EINTR)) => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A non-blocking, close-on-exec eventfd: a wake-up another thread (or a
/// caller that must not sleep) can make readable.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd with its counter at zero.
    pub fn new() -> Result<EventFd> {
        // SAFETY: eventfd(2) with flags only; the result is checked.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: eventfd returned a fresh descriptor nothing else owns.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes it readable (adds one to its counter; a full counter is
    /// readable already).
    pub fn signal(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from `one` to the eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets its counter, so it is no longer readable.
    pub fn drain(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`, the eventfd's counter.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A transport's wait descriptor: an epoll set holding its own descriptors
/// and an eventfd that makes the set readable on demand (the `wake` of a
/// caller blocked on it, or of work no descriptor will signal).
#[derive(Debug)]
pub struct WaitSet {
    epoll: Epoll,
    wake: EventFd,
}

impl WaitSet {
    /// A set holding its eventfd, reported as `wake_token`.
    pub fn new(wake_token: u64) -> Result<WaitSet> {
        let epoll = Epoll::new()?;
        let wake = EventFd::new()?;
        epoll.add(wake.as_raw_fd(), READABLE, wake_token)?;
        Ok(WaitSet { epoll, wake })
    }

    /// The set, to watch the transport's descriptors and wait on them.
    pub fn epoll(&self) -> &Epoll {
        &self.epoll
    }

    /// Makes the set readable until [`drain`](Self::drain).
    pub fn wake(&self) {
        self.wake.signal();
    }

    /// Takes back a [`wake`](Self::wake): its token was reported.
    pub fn drain(&self) {
        self.wake.drain();
    }
}

impl AsRawFd for WaitSet {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

/// An all-zero event array entry, for sizing wait buffers.
pub const EMPTY_EVENT: libc::epoll_event = libc::epoll_event { events: 0, u64: 0 };

/// Eight random bytes from the kernel's generator, for what must not be
/// guessed (remote keys, admission challenges): `getrandom`, else
/// `/dev/urandom`, else the error.
pub fn secret_u64() -> Result<u64> {
    let mut v = [0u8; 8];
    loop {
        // SAFETY: `v` is a writable buffer of 8 bytes.
        let n = unsafe { libc::getrandom(v.as_mut_ptr().cast(), v.len(), 0) };
        match n {
            8 => return Ok(u64::from_le_bytes(v)),
            _ if errno() == libc::EINTR => continue,
            _ => break,
        }
    }
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut v))
        .map_err(|e| Error::Os(e.raw_os_error().unwrap_or(libc::EIO)))?;
    Ok(u64::from_le_bytes(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_epoll_reports_readiness() {
        let inner = Epoll::new().unwrap();
        let outer = Epoll::new().unwrap();
        outer.add(inner.as_raw_fd(), READABLE, 7).unwrap();
        let mut evs = [EMPTY_EVENT; 4];
        assert_eq!(outer.wait(&mut evs, 0).unwrap(), 0);
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe writes.
        cvt(unsafe { libc::pipe(fds.as_mut_ptr()) }).unwrap();
        // SAFETY: pipe() returned two fresh descriptors owned from here on.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        inner.add(r.as_raw_fd(), READABLE, 1).unwrap();
        // SAFETY: writes one byte from a valid buffer to our pipe.
        cvt(unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) }).unwrap();
        assert_eq!(outer.wait(&mut evs, 1000).unwrap(), 1);
        assert_eq!({ evs[0].u64 }, 7);
        inner.delete(r.as_raw_fd()).unwrap();
        assert!(inner.delete(r.as_raw_fd()).is_err());
    }
}
