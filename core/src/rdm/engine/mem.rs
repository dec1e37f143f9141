//! An in-memory transport: the test double of [`Transport`] the engine's
//! unit tests (and its fuzz harness, `fuzzing`) run over. Endpoints of one [`Net`] connect by address; each
//! connection is a pair of bounded frame queues, so a full queue refuses a
//! frame as a ring would. Pulls read the sender's memory directly (every
//! endpoint is in this process), or are refused to test the push path.
//! Deterministic: nothing moves but in `progress`.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use slab::Slab;

use crate::error::Error;
use crate::rdm::transport::{Bytes, Cause, ConnId, Event, Events, Refused, Transport};

type Frame = (Vec<u8>, Vec<u8>);

struct Pipe {
    /// Each side's transport and connection id (side 1's once accepted).
    ends: [Option<(usize, ConnId)>; 2],
    /// Frames to each side.
    queues: [VecDeque<Frame>; 2],
    /// Why each side's peer is gone, once it is.
    gone: [Option<Cause>; 2],
}

#[derive(Default)]
struct Inner {
    listeners: HashMap<Vec<u8>, usize>,
    pipes: Slab<Pipe>,
    accepts: HashMap<usize, Vec<usize>>,
    ups: HashMap<usize, Vec<ConnId>>,
    next: usize,
    /// Connects to refuse with `EAGAIN` (a full listen backlog) first.
    busy: usize,
}

/// A set of in-memory transports that can reach each other.
#[derive(Clone, Default)]
pub struct Net {
    inner: Arc<Mutex<Inner>>,
    /// Frames a direction holds before `send` says full.
    pub cap: usize,
    /// The largest payload a frame carries, when not [`DEFAULT_PAYLOAD`].
    payload: Option<usize>,
    /// Frames a burst of posts may hold back (`Transport::coalesce`).
    coalesce: usize,
}

/// The largest payload of a frame on a net made by [`Net::new`].
pub const DEFAULT_PAYLOAD: usize = 1024;

impl Net {
    /// A net whose connections hold `cap` frames each way.
    pub fn new(cap: usize) -> Net {
        Net {
            inner: Arc::default(),
            cap,
            payload: None,
            coalesce: 0,
        }
    }

    /// The same net with transports that let bursts of posts hold back
    /// `n` frames, as TCP's do.
    #[cfg(test)]
    pub fn with_coalesce(mut self, n: usize) -> Net {
        self.coalesce = n;
        self
    }

    /// The same net with frames of at most `payload` bytes of payload
    /// (larger ones are a protocol error).
    #[cfg(test)]
    pub fn with_payload(mut self, payload: usize) -> Net {
        self.payload = Some(payload);
        self
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the next `n` connects fail with `EAGAIN`, as a full listen
    /// backlog does.
    #[cfg(test)]
    pub fn busy(&self, n: usize) {
        self.lock().busy = n;
    }

    /// Makes `addr` reach `m` too: an address that stands for whichever
    /// endpoint listens there, as TCP's nonce 0 does.
    #[cfg(test)]
    pub fn listen_also(&self, m: &Mem, addr: &[u8]) {
        self.lock().listeners.insert(addr.to_vec(), m.me);
    }

    /// A transport on this net; `pull` says whether it can read peers' memory.
    pub fn open(&self, pull: bool) -> Mem {
        let mut n = self.lock();
        n.next += 1;
        let me = n.next;
        let addr = format!("mem{me}").into_bytes();
        n.listeners.insert(addr.clone(), me);
        Mem {
            net: self.clone(),
            me,
            addr,
            pull,
            conns: Slab::new(),
            frames: 0,
            wakes: Default::default(),
        }
    }
}

/// One endpoint's transport on a [`Net`].
pub struct Mem {
    net: Net,
    me: usize,
    addr: Vec<u8>,
    pull: bool,
    /// Connection id -> (pipe, side).
    conns: Slab<(usize, usize)>,
    /// Frames this transport delivered.
    pub frames: u64,
    /// Calls of `wake`.
    pub wakes: std::sync::atomic::AtomicU64,
}

impl Mem {
    /// Ends connection `conn` as a broken link would: both sides see
    /// `cause` once they have read what was sent before.
    #[cfg(test)]
    pub fn break_conn(&mut self, conn: ConnId, cause: Cause) {
        if let Some(&(pipe, _)) = self.conns.get(conn) {
            if let Some(p) = self.net.lock().pipes.get_mut(pipe) {
                p.gone = [Some(cause); 2];
            }
        }
    }

    /// Closes `conn` from this side: the peer sees `cause`, this side nothing.
    fn end(&mut self, conn: ConnId, cause: Cause) {
        if let Some((pipe, side)) = self.conns.try_remove(conn) {
            if let Some(p) = self.net.lock().pipes.get_mut(pipe) {
                p.gone[1 - side] = Some(cause);
                p.ends[side] = None;
            }
        }
    }

    /// Writes raw bytes as a frame on `conn`, as a hostile peer would.
    pub fn send_raw(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) {
        let _ = self.send(conn, header, payload);
    }

    /// This transport's connections.
    pub fn conns(&self) -> Vec<ConnId> {
        self.conns.iter().map(|(c, _)| c).collect()
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        for c in self.conns() {
            self.end(c, Cause::Closed);
        }
        self.net.lock().listeners.remove(&self.addr);
    }
}

impl Transport for Mem {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn address(&self) -> &[u8] {
        &self.addr
    }

    fn max_payload(&self) -> usize {
        self.net.payload.unwrap_or(DEFAULT_PAYLOAD)
    }

    fn coalesce(&self) -> usize {
        self.net.coalesce
    }

    fn connect(&mut self, addr: &[u8]) -> Result<ConnId, Cause> {
        let mut n = self.net.lock();
        if n.busy > 0 {
            n.busy -= 1;
            return Err(Cause::Failed(libc::EAGAIN));
        }
        let Some(&target) = n.listeners.get(addr) else {
            return Err(Cause::Failed(libc::ECONNREFUSED));
        };
        let conn = self.conns.vacant_key();
        let pipe = n.pipes.insert(Pipe {
            ends: [Some((self.me, conn)), None],
            queues: [VecDeque::new(), VecDeque::new()],
            gone: [None, None],
        });
        n.accepts.entry(target).or_default().push(pipe);
        n.ups.entry(self.me).or_default().push(conn);
        drop(n);
        self.conns.insert((pipe, 0));
        Ok(conn)
    }

    fn send(&mut self, conn: ConnId, header: &[u8], payload: &[u8]) -> Result<(), Refused> {
        let &(pipe, side) = self.conns.get(conn).ok_or(Refused::Gone(Cause::Closed))?;
        if payload.len() > self.max_payload() {
            return Err(Refused::Gone(Cause::Protocol("frame over the transport's largest")));
        }
        let cap = self.net.cap;
        let mut n = self.net.lock();
        let p = n.pipes.get_mut(pipe).ok_or(Refused::Gone(Cause::Closed))?;
        if let Some(cause) = p.gone[side] {
            return Err(Refused::Gone(cause));
        }
        let q = &mut p.queues[1 - side];
        if q.len() >= cap {
            return Err(Refused::Full);
        }
        q.push_back((header.to_vec(), payload.to_vec()));
        Ok(())
    }

    fn pull(&mut self, conn: ConnId, remote: u64, dst: &mut [u8]) -> Result<(), Error> {
        if !self.pull || !self.conns.contains(conn) {
            return Err(Error::NotSupported("pull"));
        }
        read_sender(remote, dst)
    }

    fn close(&mut self, conn: ConnId) {
        self.end(conn, Cause::Closed);
    }

    fn progress(&mut self, events: &mut dyn Events) {
        let (accepts, ups) = {
            let mut n = self.net.lock();
            let a = n.accepts.remove(&self.me).unwrap_or_default();
            let u = n.ups.remove(&self.me).unwrap_or_default();
            (a, u)
        };
        for pipe in accepts {
            let conn = self.conns.insert((pipe, 1));
            if let Some(p) = self.net.lock().pipes.get_mut(pipe) {
                p.ends[1] = Some((self.me, conn));
            }
            events.event(Event::Up { conn });
        }
        for conn in ups {
            events.event(Event::Up { conn });
        }
        for (conn, (pipe, side)) in self.conns.iter().map(|(c, &e)| (c, e)).collect::<Vec<_>>() {
            loop {
                if !events.ready(conn) {
                    break;
                }
                let next = {
                    let mut n = self.net.lock();
                    match n.pipes.get_mut(pipe) {
                        Some(p) => match p.queues[side].pop_front() {
                            Some(f) => Ok(f),
                            None => Err(p.gone[side]),
                        },
                        None => Err(Some(Cause::Closed)),
                    }
                };
                match next {
                    Ok((h, payload)) => {
                        self.frames += 1;
                        events.event(Event::Frame {
                            conn,
                            header: Bytes::new(&h),
                            payload: Bytes::new(&payload),
                        });
                    }
                    Err(Some(cause)) => {
                        self.conns.remove(conn);
                        events.event(Event::Down { conn, cause });
                        break;
                    }
                    Err(None) => break,
                }
            }
        }
    }

    fn wait_fd(&self) -> RawFd {
        -1
    }

    fn wake(&self) {
        self.wakes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn prepare_wait(&mut self) -> bool {
        true
    }
}

/// The pull of the unit tests: a plain copy from the sender's buffer.
#[cfg(test)]
fn read_sender(remote: u64, dst: &mut [u8]) -> Result<(), Error> {
    // SAFETY: the unit tests' endpoints of a Net all live in this process and
    // are honest: the engine that sent `remote` in its request to send keeps
    // that buffer (`dst.len()` bytes at most) until the answer to this pull
    // comes.
    unsafe { std::ptr::copy_nonoverlapping(remote as *const u8, dst.as_mut_ptr(), dst.len()) };
    Ok(())
}

/// Outside the unit tests (the fuzz harness) an address comes from a
/// hostile peer: never read, the sender pushes instead.
#[cfg(not(test))]
fn read_sender(_: u64, _: &mut [u8]) -> Result<(), Error> {
    Err(Error::NotSupported("pull"))
}
