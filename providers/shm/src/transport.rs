//! The shared-memory transport under xfer's RDM engine: a [`ShmPort`] seen
//! through [`Transport`]. Connections are the port's peers, frames go
//! through their rings, a rendezvous pull is one cross-memory-attach copy
//! (refused, so the engine has the sender push the bytes through the ring,
//! where CMA is off or not permitted), and the wait descriptor is the port's.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use xfer_core::unstable::provider::RmaKind;
use xfer_core::unstable::rdm::transport::{
    Cause, ConnId, Event as RdmEvent, Events, Pulled, Refused, Remote, Transport,
};
use xfer_core::Error;

use crate::cma::{Cma, CmaError};
use crate::config::ShmConfig;
use crate::entry;
use crate::fence::Fences;
use crate::port::{DownReason, Event, PeerId, SendError, ShmPort, Sink};

/// A port as a transport.
#[derive(Debug)]
pub struct ShmTransport {
    port: ShmPort,
    /// `prepare_wait` put the port to sleep; the next progress wakes it.
    armed: bool,
}

impl ShmTransport {
    /// Opens a port with `cfg`.
    pub fn open(cfg: &ShmConfig) -> io::Result<ShmTransport> {
        Ok(ShmTransport {
            port: ShmPort::open(cfg)?,
            armed: false,
        })
    }

    /// Opens a port with `cfg` whose peers may copy into this side's
    /// regions under the grants of the domain owning `fences`.
    pub fn open_serving(cfg: &ShmConfig, fences: Arc<Fences>) -> io::Result<ShmTransport> {
        let mut t = ShmTransport::open(cfg)?;
        t.port.serve_grants(fences);
        Ok(t)
    }

    /// The port, for what it knows of peers.
    pub fn port(&self) -> &ShmPort {
        &self.port
    }
}

fn os_errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn cause(reason: &DownReason) -> Cause {
    match reason {
        DownReason::Closed => Cause::Closed,
        DownReason::Corrupt(_) => Cause::Protocol("corrupt shared-memory ring entry"),
        DownReason::Handshake(_) => Cause::Failed(libc::ECONNREFUSED),
        DownReason::Os(e) => Cause::Failed(os_errno(e)),
    }
}

/// A failed cross-memory copy as the engine's error; `bad_range` names a
/// range that was not mapped.
fn cma_error(e: CmaError, bad_range: &'static str) -> Error {
    match e {
        CmaError::NotAvailable(_) | CmaError::NoPeer | CmaError::Revoked => {
            Error::NotSupported("cross-memory attach not available towards this peer")
        }
        CmaError::BadRange { .. } => Error::RemoteAccess(bad_range),
        CmaError::PeerGone => Error::PeerClosed {
            peer: xfer_core::PeerAddr::UNSPEC,
        },
        CmaError::Os(e) => Error::Os(os_errno(&e)),
    }
}

/// The engine's events as the port's sink.
struct Adapter<'e>(&'e mut dyn Events);

impl Sink for Adapter<'_> {
    fn ready(&mut self, peer: PeerId) -> bool {
        self.0.ready(peer.0)
    }

    fn event(&mut self, ev: Event<'_>) {
        self.0.event(match ev {
            Event::Frame { peer, frame } => RdmEvent::Frame {
                conn: peer.0,
                header: frame.header,
                payload: frame.payload,
            },
            Event::Up { peer } => RdmEvent::Up { conn: peer.0 },
            Event::Down { peer, reason } => RdmEvent::Down {
                conn: peer.0,
                cause: cause(&reason),
            },
        })
    }
}

impl Transport for ShmTransport {
    fn name(&self) -> &'static str {
        "shm"
    }

    fn address(&self) -> &[u8] {
        self.port.address()
    }

    fn max_payload(&self) -> usize {
        entry::max_payload(self.port.config().ring_bytes, Self::MAX_HEADER)
    }

    fn connect(&mut self, addr: &[u8]) -> Result<ConnId, Cause> {
        self.port
            .connect(addr)
            .map(|p| p.0)
            .map_err(|e| Cause::Failed(os_errno(&e)))
    }

    #[inline]
    fn send(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) -> Result<(), Refused> {
        match self.port.send(PeerId(conn), header, payload) {
            Ok(()) => Ok(()),
            Err(SendError::Full) => {
                // Refused after `prepare_wait` armed the port (no progress
                // since, so the next `prepare_wait` returns at once): ask
                // for the consumer's signal now, as arming would have, or
                // a caller that sleeps next waits for room no one reports.
                if self.armed {
                    self.port.want_space_now(PeerId(conn));
                }
                Err(Refused::Full)
            }
            // An accepted peer's handshake completes within a poll or two.
            Err(SendError::NotReady) => Err(Refused::Full),
            Err(SendError::NoPeer) => Err(Refused::Gone(Cause::Closed)),
            Err(SendError::TooLarge) => Err(Refused::Gone(Cause::Protocol("frame over the ring's largest"))),
            Err(SendError::Broken) => Err(Refused::Gone(Cause::Protocol("corrupt shared-memory ring entry"))),
        }
    }

    /// Below `shm.cma_min` pushed only; from it, with `shm.pull_after_us`
    /// set, pushed first (both CPUs copying through the ring beat one
    /// `process_vm_readv` while each process has a CPU) and the rest
    /// pulled once the sender pushed nothing for that long (it is not
    /// running: the CPUs are shared). Without CMA the pull refuses, and
    /// every rendezvous is pushed.
    fn push_first(&self, conn: ConnId, len: usize) -> Option<std::time::Duration> {
        let cfg = self.port.config();
        let cma = cfg.cma
            && self
                .port
                .peer_info(PeerId(conn))
                .is_some_and(|i| i.cma == Cma::Available);
        match (cma, len < cfg.cma_min, cfg.pull_after_us) {
            (false, _, _) => None,
            (true, true, _) => Some(std::time::Duration::MAX),
            (true, false, 0) => None,
            (true, false, us) => Some(std::time::Duration::from_micros(us)),
        }
    }

    fn pull(&mut self, conn: ConnId, remote: u64, dst: &mut [u8]) -> Result<(), Error> {
        let cfg = self.port.config();
        if !cfg.cma {
            return Err(Error::NotSupported("cross-memory attach off (XFER_SHM_CMA)"));
        }
        // The size rule is `push_first`'s: a pull of any size here is the
        // rest of a push that stalled, or a rendezvous from `cma_min`.
        match self.port.cma_read(PeerId(conn), remote, dst) {
            Ok(()) => Ok(()),
            Err(CmaError::BadRange { .. }) => Err(Error::Protocol("rendezvous address outside the sender's memory")),
            Err(e) => Err(cma_error(e, "")),
        }
    }

    /// One cross-memory-attach copy into or out of the target's region,
    /// under the target's fence: a grant it revoked since (a
    /// deregistration) is refused, and the engine goes in frames.
    unsafe fn start_rma(
        &mut self,
        conn: ConnId,
        kind: RmaKind,
        remote: Remote,
        local: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        let _ = token;
        if !self.port.config().cma {
            return Err(Error::NotSupported("cross-memory attach off (XFER_SHM_CMA)"));
        }
        let peer = PeerId(conn);
        let r = match kind {
            RmaKind::Write => {
                // SAFETY: the caller keeps `local..local + len` valid and
                // unwritten for the call.
                let src = unsafe { std::slice::from_raw_parts(local.cast_const(), len) };
                self.port.granted_write(peer, remote.stamp, remote.addr, src)
            }
            RmaKind::Read => {
                // SAFETY: the caller keeps `local..local + len` valid and
                // exclusive for the call.
                let dst = unsafe { std::slice::from_raw_parts_mut(local, len) };
                self.port.granted_read(peer, remote.stamp, remote.addr, dst)
            }
        };
        match r {
            Ok(()) => Ok(Pulled::Done),
            Err(CmaError::Revoked) => Err(Error::NotSupported("the target revoked its grant")),
            Err(e) => Err(cma_error(e, "the target's granted region is not mapped")),
        }
    }

    fn close(&mut self, conn: ConnId) {
        self.port.close(PeerId(conn));
    }

    fn progress(&mut self, events: &mut dyn Events) {
        if self.armed {
            self.armed = false;
            self.port.finish_wait();
        }
        self.port.poll_with(&mut Adapter(events));
    }

    fn wait_fd(&self) -> RawFd {
        self.port.wait_fd()
    }

    fn wake(&self) {
        self.port.wake_self();
    }

    fn prepare_wait(&mut self) -> bool {
        if self.armed {
            return true;
        }
        self.armed = self.port.prepare_wait();
        if !self.armed {
            self.port.wake_self();
        }
        self.armed
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Counts what a transport reports.
    #[derive(Default)]
    struct Seen {
        up: usize,
        frames: usize,
    }

    impl Events for Seen {
        fn event(&mut self, ev: RdmEvent<'_>) {
            match ev {
                RdmEvent::Up { .. } => self.up += 1,
                RdmEvent::Frame { .. } => self.frames += 1,
                _ => {}
            }
        }
    }

    /// Whether `fd` turns readable within `ms` milliseconds.
    fn readable(fd: RawFd, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    /// A frame refused as full after `prepare_wait` armed the port (a send
    /// posted between the caller's readiness check and its sleep) still gets
    /// the consumer's signal once the consumer frees room: the producer's
    /// wait descriptor turns readable. Without it the producer slept until
    /// some other event (the async layer's 50 ms tick: 1 MiB tonic calls
    /// over shm took 50 ms each).
    #[test]
    fn a_frame_refused_after_arming_is_woken_when_room_appears() {
        let cfg = ShmConfig {
            ring_bytes: 4096,
            ..ShmConfig::default()
        };
        let mut a = ShmTransport::open(&cfg).expect("open a");
        let mut b = ShmTransport::open(&cfg).expect("open b");
        let conn = a.connect(b.address()).expect("connect");
        let (mut sa, mut sb) = (Seen::default(), Seen::default());
        let deadline = Instant::now() + Duration::from_secs(20);
        while sa.up == 0 || sb.up == 0 {
            assert!(Instant::now() < deadline, "no connection");
            a.progress(&mut sa);
            b.progress(&mut sb);
        }
        // Nothing left to report: the port arms, and its descriptor is quiet.
        while !a.prepare_wait() {
            assert!(Instant::now() < deadline, "a never got ready to sleep");
            a.progress(&mut sa);
        }
        assert!(!readable(a.wait_fd(), 0), "armed with its descriptor readable");
        let mut sent = 0;
        while a.send(conn, b"h", &[7; 200]).is_ok() {
            sent += 1;
            assert!(sent < 100, "a 4 KiB ring took {sent} entries of 4 lines");
        }
        while sb.frames < sent {
            assert!(Instant::now() < deadline, "b took {} of {sent}", sb.frames);
            b.progress(&mut sb);
        }
        assert!(
            readable(a.wait_fd(), 10_000),
            "room appeared and the producer was not woken"
        );
    }
}
