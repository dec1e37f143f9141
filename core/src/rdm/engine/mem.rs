//! An in-memory transport: the test double of [`Transport`] the engine's
//! unit tests (and its fuzz harness, `fuzzing`) run over. Endpoints of one [`Net`] connect by address; each
//! connection is a pair of bounded frame queues, so a full queue refuses a
//! frame as a ring would. Pulls read the sender's memory directly (every
//! endpoint is in this process), or are refused to test the push path. An
//! asynchronous transport ([`Net::open_async`]) exposes send buffers under
//! keys and leaves each pull pending until the test finishes or fails it
//! ([`Net::finish_pull`], [`Net::fail_pull`]), as RDMA READ does; it does
//! the user's RMA natively the same way (pending until finished or failed,
//! then a copy to or from the target's region), as RDMA WRITE and READ do.
//! Deterministic: nothing moves but in `progress`.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use slab::Slab;

use crate::error::Error;
use crate::provider::RmaKind;
use crate::rdm::transport::{
    Bytes, Cause, ConnId, DeviceAtomic, Event, Events, Exposed, Pulled, Refused, Remote, Transport,
};

type Frame = (Vec<u8>, Vec<u8>);

/// A pull an asynchronous transport started: what to copy where, and the
/// test's verdict once it gave one.
struct Pending {
    me: usize,
    /// The connection's id, pipe and side (a reused id is another pipe).
    conn: ConnId,
    pipe: (usize, usize),
    remote: Remote,
    dst: *mut u8,
    len: usize,
    token: u64,
    verdict: Option<Result<(), Error>>,
    /// A native RMA (else a pull): which.
    rma: Option<RmaKind>,
}

// SAFETY: `dst` is only written by the transport that started the pull, in
// its own progress (the engine's contract keeps it valid until then).
unsafe impl Send for Pending {}

struct Pipe {
    /// Each side's transport and connection id (side 1's once accepted).
    ends: [Option<(usize, ConnId)>; 2],
    /// Frames to each side.
    queues: [VecDeque<Frame>; 2],
    /// Why each side's peer is gone, once it is.
    gone: [Option<Cause>; 2],
    /// The link is dead without a word: frames vanish, only a probe finds out.
    cut: bool,
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
    /// Dialled connections are not reported up while set (a slow connect,
    /// as rdma_cm's can be).
    hold_ups: bool,
    /// Pulls started by asynchronous transports, oldest first.
    pulls: Vec<Pending>,
    /// Buffers exposed by asynchronous transports: (transport, key).
    exposed: Vec<(usize, u64)>,
    next_key: u64,
    /// What synchronous pullers answer `Transport::push_first`.
    push_wait: Option<std::time::Duration>,
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
    /// The keepalive interval its transports ask for.
    keepalive: Option<std::time::Duration>,
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
            keepalive: None,
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

    /// The same net with transports that ask for keepalive ticks `every`
    /// so often and probe by looking whether a connection was [`cut`](Mem::cut).
    #[cfg(test)]
    pub fn with_keepalive(mut self, every: std::time::Duration) -> Net {
        self.keepalive = Some(every);
        self
    }

    /// Holds (`true`) or lets go the `Up` of every dialled connection: a
    /// connect slower than the peer's crossing one.
    #[cfg(test)]
    pub fn hold_ups(&self, hold: bool) {
        self.lock().hold_ups = hold;
    }

    /// Makes `addr` reach `m` too: an address that stands for whichever
    /// endpoint listens there, as TCP's nonce 0 does.
    #[cfg(test)]
    pub fn listen_also(&self, m: &Mem, addr: &[u8]) {
        self.lock().listeners.insert(addr.to_vec(), m.me);
    }

    /// A transport on this net whose pulls are asynchronous: each waits
    /// for [`finish_pull`](Self::finish_pull) or
    /// [`fail_pull`](Self::fail_pull), and reads only a buffer exposed
    /// under the key its request carries.
    #[cfg(test)]
    pub fn open_async(&self) -> Mem {
        let mut m = self.open(true);
        m.deferred = true;
        m
    }

    /// Makes this net's synchronous pullers ask for every rendezvous to be
    /// pushed first, pulling the rest after `wait` with nothing pushed
    /// (`None`: pull at once); takes effect for matches from now on.
    #[cfg(test)]
    pub fn push_first(&self, wait: Option<std::time::Duration>) {
        self.lock().push_wait = wait;
    }

    /// Pulls started and not yet reported, oldest first: their lengths.
    #[cfg(test)]
    pub fn pending_pulls(&self) -> Vec<usize> {
        self.lock().pulls.iter().map(|p| p.len).collect()
    }

    /// The grant stamps of the native RMA in flight, in start order.
    #[cfg(test)]
    pub fn pending_stamps(&self) -> Vec<u64> {
        self.lock().pulls.iter().map(|p| p.remote.stamp).collect()
    }

    /// Lets the `i`-th pending pull (oldest first) complete at its
    /// transport's next progress.
    #[cfg(test)]
    pub fn finish_pull(&self, i: usize) {
        self.lock().pulls[i].verdict = Some(Ok(()));
    }

    /// Makes the `i`-th pending pull fail with `e` at its transport's next
    /// progress.
    #[cfg(test)]
    pub fn fail_pull(&self, i: usize, e: Error) {
        self.lock().pulls[i].verdict = Some(Err(e));
    }

    /// Send buffers exposed and not yet concealed.
    #[cfg(test)]
    pub fn exposed(&self) -> usize {
        self.lock().exposed.len()
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
            deferred: false,
            conns: Slab::new(),
            opening: Default::default(),
            probed: Vec::new(),
            frames: 0,
            wakes: Default::default(),
            device: Vec::new(),
            device_ops: 0,
        }
    }
}

/// A device atomic started: connection, pipe, word, operation, token.
type DeviceOp = (ConnId, (usize, usize), u64, DeviceAtomic, u64);

/// One endpoint's transport on a [`Net`].
pub struct Mem {
    net: Net,
    me: usize,
    addr: Vec<u8>,
    pull: bool,
    /// Pulls are asynchronous ([`Net::open_async`]).
    deferred: bool,
    /// Connection id -> (pipe, side).
    conns: Slab<(usize, usize)>,
    /// Dialled connections not reported up yet.
    opening: std::collections::HashSet<ConnId>,
    /// The keepalive ticks it was given (tests only read them).
    probed: Vec<Vec<ConnId>>,
    /// Frames this transport delivered.
    pub frames: u64,
    /// Calls of `wake`.
    pub wakes: std::sync::atomic::AtomicU64,
    /// Device atomics started and not yet done (each at the next
    /// progress, with the CPU's atomics on the target's word, which is in
    /// this process).
    device: Vec<DeviceOp>,
    /// Device atomics done.
    pub device_ops: u64,
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

    /// Kills `conn`'s link without a word: frames on it vanish both ways
    /// and neither side sees it end until a keepalive probe looks.
    #[cfg(test)]
    pub fn cut(&mut self, conn: ConnId) {
        if let Some(&(pipe, _)) = self.conns.get(conn) {
            if let Some(p) = self.net.lock().pipes.get_mut(pipe) {
                p.cut = true;
                p.queues = Default::default();
            }
        }
    }

    /// Keepalive ticks this transport was given, with the connections of each.
    #[cfg(test)]
    pub fn probes(&self) -> &[Vec<ConnId>] {
        &self.probed
    }

    /// Closes `conn` from this side: the peer sees `cause`, this side nothing.
    fn end(&mut self, conn: ConnId, cause: Cause) {
        self.opening.remove(&conn);
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

    /// Does the device atomics started (the word is the unit test's, in
    /// this process, granted by the target's key table) and reports them;
    /// those whose connection is gone fail.
    fn do_atomics(&mut self, events: &mut dyn Events) {
        for (conn, pipe, word, op, token) in std::mem::take(&mut self.device) {
            let result = if self.conns.get(conn) != Some(&pipe) {
                Err(Error::PeerClosed {
                    peer: crate::addr::PeerAddr::UNSPEC,
                })
            } else {
                // SAFETY: the target granted this aligned word of a region
                // the unit test keeps alive, and touches it only atomically.
                let cell = unsafe { std::sync::atomic::AtomicU64::from_ptr(word as *mut u64) };
                let sc = std::sync::atomic::Ordering::SeqCst;
                self.device_ops += 1;
                Ok(match op {
                    DeviceAtomic::FetchAdd(x) => cell.fetch_add(x, sc),
                    DeviceAtomic::CompareSwap { compare, swap } => {
                        cell.compare_exchange(compare, swap, sc, sc).unwrap_or_else(|v| v)
                    }
                })
            };
            events.event(Event::Fetched { token, result });
        }
    }

    /// Reports this transport's pulls that are over: those the test gave a
    /// verdict, and those whose connection is gone (failed).
    fn report_pulls(&mut self, events: &mut dyn Events) {
        let over: Vec<Pending> = {
            let mut n = self.net.lock();
            let (mine, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut n.pulls)
                .into_iter()
                .partition(|p| p.me == self.me && (p.verdict.is_some() || self.conns.get(p.conn) != Some(&p.pipe)));
            n.pulls = rest;
            mine
        };
        for p in over {
            let result = match p.verdict {
                _ if self.conns.get(p.conn) != Some(&p.pipe) => Err(Error::PeerClosed {
                    peer: crate::addr::PeerAddr::UNSPEC,
                }),
                Some(Ok(())) if p.rma.is_some() => {
                    // SAFETY: the engine keeps `dst..dst + len` for this
                    // operation until it is reported (now); the target's
                    // region is the unit test's, in this process, granted
                    // over this range by its key table.
                    let local = unsafe { std::slice::from_raw_parts_mut(p.dst, p.len) };
                    rma_copy(p.rma == Some(RmaKind::Write), p.remote.addr, local)
                }
                Some(Ok(())) if !self.net.lock().exposed.iter().any(|&(_, k)| Some(k) == p.remote.key) => {
                    Err(Error::RemoteAccess("no buffer exposed under the pull's key"))
                }
                Some(Ok(())) => {
                    // SAFETY: the engine keeps `dst..dst + len` for this pull
                    // until it is reported (now).
                    let dst = unsafe { std::slice::from_raw_parts_mut(p.dst, p.len) };
                    read_sender(p.remote.addr, dst)
                }
                Some(Err(e)) => Err(e),
                None => continue,
            };
            events.event(match p.rma {
                Some(_) => Event::Accessed { token: p.token, result },
                None => Event::Pulled { token: p.token, result },
            });
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        for c in self.conns() {
            self.end(c, Cause::Closed);
        }
        let mut n = self.net.lock();
        n.listeners.remove(&self.addr);
        let me = self.me;
        n.pulls.retain(|p| p.me != me);
        n.exposed.retain(|&(m, _)| m != me);
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
            cut: false,
        });
        n.accepts.entry(target).or_default().push(pipe);
        n.ups.entry(self.me).or_default().push(conn);
        drop(n);
        self.conns.insert((pipe, 0));
        self.opening.insert(conn);
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
        if p.cut {
            return Ok(());
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

    fn push_first(&self, _: ConnId, _: usize) -> Option<std::time::Duration> {
        match self.pull && !self.deferred {
            true => self.net.lock().push_wait,
            false => None,
        }
    }

    fn expose(&mut self, conn: ConnId, buf: &[u8]) -> Result<Option<Exposed>, Error> {
        let _ = (conn, buf);
        if !self.deferred {
            return Ok(None);
        }
        let mut n = self.net.lock();
        n.next_key += 1;
        let key = n.next_key;
        n.exposed.push((self.me, key));
        Ok(Some(Exposed { key, handle: key }))
    }

    fn conceal(&mut self, _: ConnId, handle: u64) {
        let me = self.me;
        self.net.lock().exposed.retain(|&e| e != (me, handle));
    }

    unsafe fn start_pull(
        &mut self,
        conn: ConnId,
        remote: Remote,
        dst: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        if !self.deferred {
            // SAFETY: the caller's contract, for the call.
            let dst = unsafe { std::slice::from_raw_parts_mut(dst, len) };
            return self.pull(conn, remote.addr, dst).map(|()| Pulled::Done);
        }
        let Some(&pipe) = self.conns.get(conn) else {
            return Err(Error::NotSupported("pull"));
        };
        if self.opening.contains(&conn) {
            // As verbs', whose queue pair cannot read before it is connected.
            return Err(Error::PeerUnreachable {
                peer: crate::addr::PeerAddr::UNSPEC,
                errno: libc::ENOTCONN,
            });
        }
        if remote.key.is_none() {
            return Err(Error::NotSupported("pull without a key"));
        }
        self.net.lock().pulls.push(Pending {
            me: self.me,
            conn,
            pipe,
            remote,
            dst,
            len,
            token,
            verdict: None,
            rma: None,
        });
        Ok(Pulled::Started)
    }

    unsafe fn start_rma(
        &mut self,
        conn: ConnId,
        kind: RmaKind,
        remote: Remote,
        local: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        let Some(&pipe) = self.conns.get(conn).filter(|_| self.deferred) else {
            return Err(Error::NotSupported("native RMA"));
        };
        self.net.lock().pulls.push(Pending {
            me: self.me,
            conn,
            pipe,
            remote,
            dst: local,
            len,
            token,
            verdict: None,
            rma: Some(kind),
        });
        Ok(Pulled::Started)
    }

    fn start_atomic(&mut self, conn: ConnId, remote: Remote, op: DeviceAtomic, token: u64) -> Result<(), Error> {
        let Some(&pipe) = self.conns.get(conn).filter(|_| self.deferred) else {
            return Err(Error::NotSupported("device atomics"));
        };
        self.device.push((conn, pipe, remote.addr, op, token));
        Ok(())
    }

    fn close(&mut self, conn: ConnId) {
        self.end(conn, Cause::Closed);
    }

    fn listening_only(&self) -> bool {
        self.conns.is_empty() && self.opening.is_empty()
    }

    fn keepalive(&self) -> Option<std::time::Duration> {
        self.net.keepalive
    }

    fn probe(&mut self, conns: &[ConnId]) {
        if self.probed.len() < 1024 {
            self.probed.push(conns.to_vec());
        }
        for &c in conns {
            if let Some(&(pipe, side)) = self.conns.get(c) {
                if let Some(p) = self.net.lock().pipes.get_mut(pipe).filter(|p| p.cut) {
                    p.gone[side].get_or_insert(Cause::Failed(libc::ETIMEDOUT));
                }
            }
        }
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
            if self.conns.contains(conn) && self.net.lock().hold_ups {
                self.net.lock().ups.entry(self.me).or_default().push(conn);
                continue;
            }
            self.opening.remove(&conn);
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
                        self.opening.remove(&conn);
                        events.event(Event::Down { conn, cause });
                        break;
                    }
                    Err(None) => break,
                }
            }
        }
        if self.deferred {
            self.report_pulls(events);
        }
        self.do_atomics(events);
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

/// A native RMA of the unit tests: a plain copy to or from the target's
/// region.
#[cfg(test)]
fn rma_copy(write: bool, remote: u64, local: &mut [u8]) -> Result<(), Error> {
    let (src, dst) = match write {
        true => (local.as_ptr(), remote as *mut u8),
        false => (remote as *const u8, local.as_mut_ptr()),
    };
    // SAFETY: the unit tests' targets are in this process, and the engine
    // starts a native RMA only inside a region the target's key table
    // granted, which the test keeps registered while it runs.
    unsafe { std::ptr::copy(src, dst, local.len()) };
    Ok(())
}

/// Never outside the unit tests: a hostile address is never written.
#[cfg(not(test))]
fn rma_copy(_: bool, _: u64, _: &mut [u8]) -> Result<(), Error> {
    Err(Error::NotSupported("native RMA"))
}

/// Outside the unit tests (the fuzz harness) an address comes from a
/// hostile peer: never read, the sender pushes instead.
#[cfg(not(test))]
fn read_sender(_: u64, _: &mut [u8]) -> Result<(), Error> {
    Err(Error::NotSupported("pull"))
}
