//! Rendezvous by RDMA READ: the sender's buffer is registered through the
//! domain's MR cache with remote read access ([`VerbsTransport::expose_buf`]),
//! its rkey rides in the engine's request to send, and the receiver reads
//! the payload straight into its (cache-registered) receive buffer with
//! signaled `IBV_WR_RDMA_READ`s on the connection's QP. A payload longer
//! than the port's largest message is read in chunks; a connection has at
//! most its negotiated initiator depth (the QP's `max_rd_atomic`) of them
//! in flight, the rest wait for those to complete. The pull is reported to
//! the engine once, when its last chunk completed or a chunk failed.
//!
//! The user's RMA goes the same way where the engine found it may
//! ([`VerbsTransport::start_rma_on`]): a READ of the target's region, or an
//! RDMA WRITE into it (chunked alike; WRITEs are not bound by the initiator
//! depth), against the rkey the target's remote key carries
//! ([`rkey_of`]), and is reported as `Event::Accessed`.
//!
//! A READ's completion carries [`PULL_TAG`] and the pull's key in its
//! `wr_id`. A connection that ends keeps its QP in a grave until its READs
//! are flushed, so the device writes no receive buffer the engine already
//! took back. rxe reports requests of a QP in the error state as
//! successful, so a pull's last READ marks the last bytes it must write
//! ([`Tail`]): a pull whose mark is gone is done; only one whose mark is
//! still there (or a WRITE's, which has nothing local to mark) is taken as
//! done only while its QP is not in error, which costs a query.

use slab::Slab;
use xfer_core::unstable::mr::{Access, CacheRef};
use xfer_core::unstable::provider::RmaKind;
use xfer_core::unstable::rdm::transport::{ConnId, Event, Events, Exposed, Pulled, Remote};
use xfer_core::{Error, PeerAddr};

use super::conn::State;
use super::mark::Tail;
use super::VerbsTransport;
use crate::cq::Wc;
use crate::qp::{RemoteBuf, Sge};

/// Tag of the `wr_id` of an RDMA READ (the pull's key is the rest):
/// distinct from send slots (bit 62) and receives (bit 63).
pub const PULL_TAG: u64 = 1 << 61;

/// The bit of a `verbs` remote key that says its high 32 bits are the
/// region's rkey (a region the device registered).
pub const RKEY_FLAG: u64 = 1 << 31;

/// A remote key with the device's rkey folded in: the rkey in the high 32
/// bits, [`RKEY_FLAG`], and 31 bits of `random` below.
pub fn fold_rkey(rkey: u32, random: u64) -> u64 {
    (u64::from(rkey) << 32) | RKEY_FLAG | (random & (RKEY_FLAG - 1))
}

/// The rkey a remote key carries, if it carries one.
pub fn rkey_of(key: u64) -> Option<u32> {
    (key & RKEY_FLAG != 0).then_some((key >> 32) as u32)
}

/// One pull: where from, where to, and how far it got.
pub struct Pull {
    conn: ConnId,
    qpn: u32,
    token: u64,
    remote: RemoteBuf,
    dst: u64,
    len: usize,
    lkey: u32,
    mr: Option<CacheRef>,
    /// Bytes posted so far.
    posted: usize,
    /// Chunks posted and not completed.
    in_flight: u32,
    /// The first failure.
    failed: Option<Error>,
    /// RDMA WRITEs (else READs).
    write: bool,
    /// A READ's last bytes, marked when its last chunk is posted.
    tail: Option<Tail>,
    /// The user's RMA (reported as `Accessed`), else a rendezvous pull.
    rma: bool,
}

/// The error a READ's failed completion stands for.
fn rdma_error(wc: &Wc) -> Error {
    use rdma_sys::ibv_wc_status as st;
    tracing::debug!(
        status = wc.status_str(),
        vendor = wc.vendor_err(),
        "verbs RDMA READ or WRITE failed"
    );
    match wc.status() {
        st::IBV_WC_REM_ACCESS_ERR => Error::RemoteAccess("the peer's device refused the key or range"),
        st::IBV_WC_REM_INV_REQ_ERR => Error::RemoteAccess("the peer's device refused the request"),
        st::IBV_WC_LOC_PROT_ERR => Error::InvalidArgument("local buffer not covered by its registration"),
        st::IBV_WC_RETRY_EXC_ERR => gone(libc::ETIMEDOUT),
        _ => gone(libc::ECONNRESET),
    }
}

/// The connection failed under a pull (the engine names the peer).
fn gone(errno: i32) -> Error {
    Error::PeerUnreachable {
        peer: PeerAddr::UNSPEC,
        errno,
    }
}

impl VerbsTransport {
    /// Registers `buf` for the peer's READ: its rkey, and the cache
    /// reference to give back.
    pub(super) fn expose_buf(&mut self, buf: &[u8]) -> Result<Exposed, Error> {
        let (r, _, rkey) = self.register(buf.as_ptr() as usize, buf.len(), Access::REMOTE_READ)?;
        Ok(Exposed {
            key: u64::from(rkey),
            handle: self.exposed.insert(r) as u64,
        })
    }

    /// Gives back an exposure.
    pub(super) fn conceal_buf(&mut self, handle: u64) {
        match usize::try_from(handle).ok().and_then(|h| self.exposed.try_remove(h)) {
            Some(r) => self.release(r),
            None => xfer_core::warn_limited!(handle, "verbs: concealing an unknown exposure"),
        }
    }

    /// The lkey and rkey of `[ptr, ptr + len)` from the MR cache, with the
    /// reference that keeps the registration.
    fn register(&self, ptr: usize, len: usize, access: Access) -> Result<(CacheRef, u32, u32), Error> {
        crate::mr::cached_keys(&mut self.cache(), ptr, len, access)
    }

    fn release(&self, r: CacheRef) {
        if let Err(e) = self.cache().release(r) {
            xfer_core::warn_limited!(error = %e, "releasing an MR cache reference");
        }
    }

    /// Starts pulling `len` bytes at `remote` into `dst` on `k`.
    ///
    /// # Safety
    /// As `Transport::start_pull`: `dst..dst + len` stays valid and
    /// untouched until the pull is reported.
    pub(super) unsafe fn start(
        &mut self,
        k: ConnId,
        remote: Remote,
        dst: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        let Some(rkey) = remote.key.and_then(|key| u32::try_from(key).ok()) else {
            // A peer that exposed nothing pushes.
            return Err(Error::NotSupported("a request to send without an rkey"));
        };
        // SAFETY: the caller's contract, passed on.
        unsafe {
            self.begin(
                k,
                RemoteBuf {
                    addr: remote.addr,
                    rkey,
                },
                dst,
                len,
                token,
                (false, false),
            )
        }
    }

    /// Starts the user's RMA `kind` of `len` bytes between `local` and
    /// `remote` on `k`, natively when the remote key carries an rkey.
    ///
    /// # Safety
    /// As `Transport::start_rma`: `local..local + len` stays valid and
    /// untouched until the operation is reported.
    pub(super) unsafe fn start_rma_on(
        &mut self,
        k: ConnId,
        kind: RmaKind,
        remote: Remote,
        local: *mut u8,
        len: usize,
        token: u64,
    ) -> Result<Pulled, Error> {
        let Some(rkey) = remote.key.and_then(rkey_of) else {
            return Err(Error::NotSupported("a remote key without an rkey"));
        };
        let remote = RemoteBuf {
            addr: remote.addr,
            rkey,
        };
        // SAFETY: the caller's contract, passed on.
        unsafe { self.begin(k, remote, local, len, token, (kind == RmaKind::Write, true)) }
    }

    /// Starts READs (or WRITEs) of `len` bytes between `remote` and `dst`
    /// on `k`; `(write, rma)` says which and how it is reported.
    ///
    /// # Safety
    /// As [`start`](Self::start).
    unsafe fn begin(
        &mut self,
        k: ConnId,
        remote: RemoteBuf,
        dst: *mut u8,
        len: usize,
        token: u64,
        (write, rma): (bool, bool),
    ) -> Result<Pulled, Error> {
        let Some(c) = self.conns.get(k).filter(|c| c.state == State::Ready) else {
            return Err(gone(libc::ENOTCONN));
        };
        let Some(qpn) = c.qp.as_ref().map(|qp| qp.qp_num()) else {
            return Err(gone(libc::ENOTCONN));
        };
        let (mr, lkey, _) = self.register(dst as usize, len, Access::LOCAL_WRITE).map_err(|e| {
            // The sender can still push it, or the engine send it in frames.
            xfer_core::warn_limited!(error = %e, "verbs: registering a local buffer for RDMA");
            Error::NotSupported("local buffer not registrable")
        })?;
        let key = self.reads.insert(Pull {
            conn: k,
            qpn,
            token,
            remote,
            dst: dst as u64,
            len,
            lkey,
            mr: Some(mr),
            posted: 0,
            in_flight: 0,
            failed: None,
            write,
            rma,
            tail: None,
        });
        self.post_reads(key);
        let p = &self.reads[key];
        if p.in_flight == 0 && p.failed.is_some() {
            let p = self.drop_pull(key);
            return Err(p.failed.unwrap_or(Error::Internal("pull failed")));
        }
        if p.posted < p.len {
            self.reading.push(key);
            self.chores = true;
        }
        Ok(Pulled::Started)
    }

    /// Posts pull `key`'s next chunks while its connection's initiator
    /// depth, its send queue and the CQ have room.
    fn post_reads(&mut self, key: usize) {
        let max_msg = self.max_msg;
        let Some(p) = self.reads.get_mut(key) else { return };
        let Some(c) = self.conns.get_mut(p.conn).filter(|c| c.state == State::Ready) else {
            p.failed.get_or_insert(gone(libc::ECONNRESET));
            return;
        };
        let Some(qp) = c.qp.as_mut() else {
            p.failed.get_or_insert(gone(libc::ECONNRESET));
            return;
        };
        while p.posted < p.len
            && p.failed.is_none()
            && (p.write || c.reads < c.rd_depth)
            && self.signaled < self.cq_room
        {
            let n = (p.len - p.posted).min(max_msg);
            let local = Sge {
                addr: p.dst + p.posted as u64,
                length: n as u32,
                lkey: p.lkey,
            };
            let remote = RemoteBuf {
                addr: p.remote.addr.wrapping_add(p.posted as u64),
                rkey: p.remote.rkey,
            };
            if !p.write && p.posted + n == p.len && p.tail.is_none() {
                // SAFETY: the last chunk of the engine's buffer, the
                // transport's until the pull is reported; the READ posted
                // next is the only other writer.
                p.tail = Some(unsafe { Tail::mark(local.addr as *mut u8, n) });
            }
            let before = qp.signaled_in_flight();
            // SAFETY: `local` is the engine's buffer, registered through
            // the MR cache (the pull holds the reference) and left alone by
            // the engine until the operation is reported, which is after
            // this request's completion (or its QP's destruction).
            let posted = unsafe {
                match p.write {
                    true => qp.write(PULL_TAG | key as u64, local, remote, None, true),
                    false => qp.read(PULL_TAG | key as u64, local, remote, true),
                }
            };
            match posted {
                Ok(()) => {
                    self.signaled += qp.signaled_in_flight().saturating_sub(before);
                    p.posted += n;
                    p.in_flight += 1;
                    if p.write {
                        c.writes += 1;
                        self.stats.rdma_writes += 1;
                        self.stats.rdma_write_bytes += n as u64;
                    } else {
                        c.reads += 1;
                        self.stats.rdma_reads += 1;
                        self.stats.rdma_read_bytes += n as u64;
                    }
                }
                Err(Error::Again) => break,
                Err(e) => {
                    p.failed = Some(e);
                }
            }
        }
    }

    /// Posts what waiting pulls can now; reports those that ended.
    pub(super) fn continue_reads(&mut self) {
        let mut list = std::mem::take(&mut self.reading);
        list.retain(|&key| {
            self.post_reads(key);
            let Some(p) = self.reads.get(key) else { return false };
            if p.failed.is_some() && p.in_flight == 0 {
                self.finish(key);
                return false;
            }
            p.posted < p.len && p.failed.is_none()
        });
        list.append(&mut self.reading);
        self.reading = list;
    }

    /// A READ's or WRITE's completion (success or error) on QP `qpn`.
    pub(super) fn on_read(&mut self, wc: &Wc) {
        let key = (wc.wr_id() & !PULL_TAG) as usize;
        let qpn = wc.qp_num();
        let write = self.reads.get(key).is_some_and(|p| p.qpn == qpn && p.write);
        // The QP's READ or WRITE in flight is over, wherever the QP is now.
        let conn = self.by_qpn.get(qpn);
        match conn {
            Some(k) => {
                let c = &mut self.conns[k];
                match write {
                    true => c.writes = c.writes.saturating_sub(1),
                    false => c.reads = c.reads.saturating_sub(1),
                }
            }
            None => {
                if let Some(g) = self.graves.get_mut(&qpn) {
                    match write {
                        true => g.writes = g.writes.saturating_sub(1),
                        false => g.reads = g.reads.saturating_sub(1),
                    }
                    if g.done() {
                        self.graves.remove(&qpn);
                    }
                }
            }
        }
        let Some(p) = self.reads.get_mut(key).filter(|p| p.qpn == qpn) else {
            xfer_core::warn_limited!(key, "verbs: a READ completion of no pull");
            return;
        };
        p.in_flight -= 1;
        if !wc.is_ok() {
            p.failed.get_or_insert_with(|| rdma_error(wc));
        }
        if p.in_flight > 0 || (p.posted < p.len && p.failed.is_none()) {
            if p.posted < p.len && !self.reading.contains(&key) {
                self.reading.push(key);
                self.chores = true;
            }
            return;
        }
        // A READ's marked tail written means its data landed; else taken
        // as done only from a QP that is not in error (rxe reports flushed
        // requests as successful).
        let unproven = p.failed.is_none() && !p.tail.is_some_and(|t| t.written());
        if unproven && !self.qp_live(conn) {
            self.reads[key].failed = Some(gone(libc::ECONNRESET));
        }
        self.finish(key);
    }

    /// Pull `key` is over (the device writes its buffer no more): its
    /// registration back, and a failed READ's tail as it was.
    fn drop_pull(&mut self, key: usize) -> Pull {
        let mut p = self.reads.remove(key);
        if let Some(r) = p.mr.take() {
            self.release(r);
        }
        if let (Some(t), Some(_)) = (p.tail, &p.failed) {
            t.restore();
        }
        p
    }

    /// Pull `key` is over: its registration back, its report due.
    fn finish(&mut self, key: usize) {
        let p = self.drop_pull(key);
        let result = match p.failed {
            Some(e) if p.write => {
                self.stats.rdma_writes_failed += 1;
                Err(e)
            }
            Some(e) => {
                self.stats.rdma_reads_failed += 1;
                Err(e)
            }
            None => Ok(()),
        };
        self.pulled.push((p.token, p.rma, result));
        self.chores = true;
    }

    /// Fails the pulls of connection `k` (ended) that have no READ in
    /// flight; those with one wait for its flush.
    pub(super) fn end_reads(&mut self, k: ConnId) {
        let idle: Vec<usize> = self
            .reads
            .iter_mut()
            .filter(|(_, p)| p.conn == k)
            .filter_map(|(key, p)| {
                p.failed.get_or_insert(gone(libc::ECONNRESET));
                (p.in_flight == 0).then_some(key)
            })
            .collect();
        for key in idle {
            self.finish(key);
        }
    }

    /// Fails every pull on QP `qpn`, destroyed before its READs flushed.
    pub(super) fn abandon_reads(&mut self, qpn: u32) {
        let keys: Vec<usize> = self
            .reads
            .iter()
            .filter(|(_, p)| p.qpn == qpn)
            .map(|(k, _)| k)
            .collect();
        for key in keys {
            let p = &mut self.reads[key];
            p.in_flight = 0;
            p.failed.get_or_insert(gone(libc::ECONNRESET));
            self.finish(key);
        }
    }

    /// Reports the pulls that are over.
    pub(super) fn report_pulls(&mut self, events: &mut dyn Events) {
        for (token, rma, result) in std::mem::take(&mut self.pulled) {
            events.event(match rma {
                true => Event::Accessed { token, result },
                false => Event::Pulled { token, result },
            });
        }
    }

    /// Gives back every registration pulls and exposures hold (the QPs are
    /// gone: the device touches none of them any more).
    pub(super) fn release_all(&mut self) {
        let refs: Vec<CacheRef> = self
            .reads
            .drain()
            .filter_map(|p| {
                if let Some(t) = p.tail {
                    t.restore();
                }
                p.mr
            })
            .chain(self.exposed.drain())
            .collect();
        for r in refs {
            self.release(r);
        }
    }
}

/// Pulls by key.
pub type Pulls = Slab<Pull>;
