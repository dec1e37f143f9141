//! The endpoint handle: message, tagged and inject operations.

use std::sync::Arc;

use crate::addr::{Address, PeerAddr};
use crate::atomic::{AtomicKind, AtomicOp, Datatype};
use crate::av::AddressVector;
use crate::buffer::Buffer;
use crate::cq::CompletionQueue;
use crate::domain::Shared;
use crate::error::{Error, Result};
use crate::mr::RemoteKey;
use crate::peek::{Claim, Peeked};
use crate::provider::{CompletionLevel, Ctx, EndpointProvider, RecvOp, Rejected, RmaKind, RmaOp, SendOp};
use crate::tag::RecvSpec;

/// A reliable, connectionless endpoint (libfabric's `FI_EP_RDM`): peers are
/// handles from its address vector; connections are made on first use.
///
/// Buffers are taken by value and come back in the operation's completion,
/// so the transport never touches memory the program has freed. Dropping the
/// endpoint ends its outstanding operations with [`Error::Canceled`]
/// completions.
pub struct Endpoint {
    shared: Arc<Shared>,
    key: usize,
    cq: CompletionQueue,
    av: AddressVector,
    name: Address,
    fd: std::os::fd::RawFd,
}

impl Endpoint {
    pub(crate) fn new(
        shared: Arc<Shared>,
        key: usize,
        cq: CompletionQueue,
        av: AddressVector,
        name: Address,
        fd: std::os::fd::RawFd,
    ) -> Endpoint {
        Endpoint {
            shared,
            key,
            cq,
            av,
            name,
            fd,
        }
    }

    /// This endpoint's name; peers insert its bytes into their address vector.
    pub fn name(&self) -> Address {
        self.name
    }

    /// The id of this endpoint's provider (`0x01` tcp, `0x02` verbs): the
    /// first byte of its names and the provider byte of the remote keys its
    /// domain packs. A [`RemoteKey`] is usable here only when
    /// [`RemoteKey::provider`] equals it.
    pub fn provider_id(&self) -> u8 {
        self.shared.provider_id
    }

    /// The provider's counters for this endpoint (name, value): what paths
    /// operations took, for tests and diagnostics. Empty when the provider
    /// keeps none.
    pub fn counters(&self) -> Result<Vec<(&'static str, u64)>> {
        let st = self.shared.lock()?;
        Ok(st.eps[self.key].prov.counters())
    }

    /// The oldest peer event, if any: a peer [joined](crate::PeerEventKind::Joined)
    /// (its first connection with this endpoint is up, whichever side
    /// opened it) or left, [in order](crate::PeerEventKind::Closed) or
    /// [failing](crate::PeerEventKind::Failed) (its last connection ended).
    /// Off unless [`EndpointAttr::peer_events`](crate::EndpointAttr::peer_events)
    /// is set: then progress (this call drives it, as does polling the
    /// completion queue) queues up to that many; more are dropped and
    /// counted (counter `peer_events_lost`). Events follow connections, so
    /// a peer is seen once it connected or was connected to; a peer whose
    /// connection is replaced by another one does not leave.
    ///
    /// ```
    /// # fn f(ep: &xfer_core::Endpoint) -> xfer_core::Result<()> {
    /// // The endpoint was opened with `EndpointAttr::peer_events` set (say 64).
    /// while let Some(ev) = ep.peer_event()? {
    ///     match ev.kind {
    ///         xfer_core::PeerEventKind::Joined => println!("{} joined", ev.name),
    ///         _ => println!("{ev}"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn peer_event(&self) -> Result<Option<crate::PeerEvent>> {
        self.shared.lock()?.with_ep(self.key, |ep, cx| {
            ep.progress(cx);
            Ok(ep.peer_event())
        })
    }

    /// [`CompletionQueue::poll`] of this endpoint's queue that progresses
    /// this endpoint alone: moves what the queue holds into `out`, then
    /// what progressing this endpoint completes; returns how many. For a
    /// queue with no other endpoint bound it is the same poll with the walk
    /// over the queue's endpoints left out (the libfabric plug-in opens one
    /// queue per endpoint and polls it on every `fi_cq_read`). Never blocks.
    #[doc(hidden)]
    #[inline(always)]
    pub fn poll_alone(&self, out: &mut [crate::Completion]) -> Result<usize> {
        Ok(self.shared.lock()?.poll_ep(self.key, out))
    }

    /// The completion queue this endpoint reports to.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The address vector this endpoint resolves peers with.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// Posts a send described in full (tag, immediate data, completion
    /// request, raw buffers). A refused send comes back whole; with
    /// [`Error::Again`] when the endpoint has `max_outstanding` operations
    /// in flight, or `max_outstanding_per_peer` to `op.peer` (poll the
    /// queue, then retry).
    #[inline]
    pub fn post_send(&self, op: SendOp) -> std::result::Result<(), Rejected<SendOp>> {
        let (region, completion, peer) = (op.buf.region_domain(), op.completion, op.peer);
        self.submit(op, region, completion, Some(peer), |ep, cx, op| ep.send(cx, op))
    }

    /// Posts a receive described in full. A refused receive comes back
    /// whole; [`Error::Again`] as for [`post_send`](Self::post_send).
    #[inline]
    pub fn post_recv(&self, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>> {
        let region = op.buf.region_domain();
        self.submit(op, region, true, None, |ep, cx, op| ep.recv(cx, op))
    }

    /// The posting path every operation takes: a buffer of another domain's
    /// region refused, the `max_outstanding` bound (and, for a send or RMA
    /// to `peer`, `max_outstanding_per_peer`) admitted for an operation that
    /// will report a completion (`completion` asked, or every one without
    /// selective completion), then `f` under the domain lock. A refused
    /// operation comes back whole.
    #[inline]
    fn submit<T>(
        &self,
        op: T,
        region: Option<usize>,
        completion: bool,
        peer: Option<PeerAddr>,
        f: impl FnOnce(&mut dyn EndpointProvider, &mut Ctx<'_>, T) -> std::result::Result<(), Rejected<T>>,
    ) -> std::result::Result<(), Rejected<T>> {
        if region.is_some_and(|d| d != Arc::as_ptr(&self.shared) as usize) {
            // Another domain's keys mean nothing to this one's NIC context.
            return Err(Rejected::new(
                Error::InvalidArgument("memory region of another domain"),
                op,
            ));
        }
        let mut st = match self.shared.lock() {
            Ok(st) => st,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        // Only an endpoint with a bound counts; without one the data path
        // looks at nothing more.
        let slot = &st.eps[self.key];
        let counted = slot.counting && (completion || !slot.selective);
        if counted {
            if let Err(e) = st.admit(self.key, peer) {
                return Err(Rejected::new(e, op));
            }
        }
        st.post(self.key, counted, peer, |ep, cx| f(ep, cx, op))
    }

    /// What a tagged receive from `src` for `tag` (bits in `ignore` not
    /// compared) posted now would match among the messages that already
    /// arrived unexpected, without receiving it (`FI_PEEK`, `MPI_Iprobe`).
    /// Drives progress first; `None` when nothing matches (it never waits).
    pub fn peek(&self, src: PeerAddr, tag: u64, ignore: u64) -> Result<Option<Peeked>> {
        let spec = RecvSpec { src, tag, ignore };
        let found = self.probe(spec, false)?;
        Ok(found.map(|(p, _)| p))
    }

    /// Like [`peek`](Self::peek), and the message found is taken out of
    /// matching (`FI_PEEK | FI_CLAIM`, `MPI_Improbe`): no receive matches it
    /// any more; [`post_claimed`](Self::post_claimed) with the claim receives
    /// it. To drop it, receive it into an empty buffer (the completion is a
    /// truncation).
    pub fn claim(&self, src: PeerAddr, tag: u64, ignore: u64) -> Result<Option<(Peeked, Claim)>> {
        let spec = RecvSpec { src, tag, ignore };
        match self.probe(spec, true)? {
            Some((p, Some(c))) => Ok(Some((p, c))),
            Some((_, None)) => Err(Error::Internal("a claiming peek returned no claim")),
            None => Ok(None),
        }
    }

    fn probe(&self, spec: RecvSpec, claim: bool) -> Result<Option<(Peeked, Option<Claim>)>> {
        self.shared.lock()?.with_ep(self.key, |ep, cx| {
            ep.progress(cx);
            ep.peek(cx, spec, claim)
        })
    }

    /// Receives the message `claim` names into `buf` (`FI_CLAIM`,
    /// `MPI_Imrecv`); the completion is a tagged receive's, with `context`.
    /// A refused receive comes back with its claim and buffer:
    /// [`Error::NotFound`] for a claim this endpoint does not hold,
    /// [`Error::Again`] as for [`post_recv`](Self::post_recv).
    pub fn post_claimed(
        &self,
        claim: Claim,
        buf: Buffer,
        context: u64,
    ) -> std::result::Result<(), Rejected<(Claim, Buffer)>> {
        let id = claim.id();
        let op = RecvOp {
            spec: RecvSpec::any(),
            tagged: true,
            buf,
            context,
        };
        let region = op.buf.region_domain();
        self.submit((claim, op), region, true, None, |ep, cx, (claim, op)| {
            ep.recv_claimed(cx, claim, op)
                .map_err(|r| Rejected::new(r.error, (Claim::new(id), r.op)))
        })
        .map_err(|r| Rejected::new(r.error, (r.op.0, r.op.1.buf)))
    }

    /// Operations in flight that will report a completion, on an endpoint
    /// with an `EndpointAttr::max_outstanding` bound (what it bounds);
    /// `None` on an unbounded endpoint, which counts nothing (its data path
    /// pays nothing for the bound it does not have).
    pub fn outstanding(&self) -> Result<Option<usize>> {
        let st = self.shared.lock()?;
        let slot = &st.eps[self.key];
        Ok((slot.limit != 0).then_some(slot.outstanding))
    }

    /// Sends and RMA operations to `peer` in flight that will report a
    /// completion, on an endpoint with an
    /// `EndpointAttr::max_outstanding_per_peer` bound; `None` on an endpoint
    /// without one (nothing is counted per peer).
    pub fn outstanding_to(&self, peer: PeerAddr) -> Result<Option<usize>> {
        let st = self.shared.lock()?;
        let slot = &st.eps[self.key];
        Ok((slot.peer_limit != 0).then(|| {
            let i = usize::try_from(peer.0).unwrap_or(usize::MAX);
            slot.per_peer.get(i).map_or(0, |&n| n as usize)
        }))
    }

    /// Posts an RMA operation described in full (immediate data, completion
    /// request, raw buffers). A refused operation comes back whole.
    pub fn post_rma(&self, op: RmaOp) -> std::result::Result<(), Rejected<RmaOp>> {
        if op.kind == RmaKind::Read && op.data.is_some() {
            return Err(Rejected::new(
                Error::InvalidArgument("immediate data is for writes only"),
                op,
            ));
        }
        let (region, completion, peer) = (op.buf.region_domain(), op.completion, op.peer);
        self.submit(op, region, completion, Some(peer), |ep, cx, op| ep.rma(cx, op))
    }

    /// The target address of `offset` bytes into `remote` (what an
    /// [`RmaOp`]'s `addr` holds), after checking the key belongs to this
    /// endpoint's provider. [`Error::InvalidArgument`] for a key of another
    /// provider or an offset that overflows the address space; bounds are
    /// the target's check.
    pub fn remote_addr(&self, remote: &RemoteKey, offset: u64) -> Result<u64> {
        if remote.provider() != self.shared.provider_id {
            return Err(Error::InvalidArgument("remote key of another provider"));
        }
        remote
            .addr()
            .checked_add(offset)
            .ok_or(Error::InvalidArgument("remote offset overflows the address space"))
    }

    #[allow(clippy::too_many_arguments)]
    fn rma_owned(
        &self,
        peer: PeerAddr,
        kind: RmaKind,
        buf: Vec<u8>,
        remote: &RemoteKey,
        offset: u64,
        data: Option<u64>,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let addr = match self.remote_addr(remote, offset) {
            Ok(addr) => addr,
            Err(e) => return Err(Rejected::new(e, buf)),
        };
        let op = RmaOp {
            peer,
            kind,
            buf: buf.into(),
            addr,
            key: remote.key(),
            data,
            context,
            completion: true,
        };
        self.post_rma(op)
            .map_err(|r| Rejected::new(r.error, r.op.buf.into_vec().unwrap_or_default()))
    }

    /// Writes `buf` into the remote region `remote` at `offset` bytes from
    /// its start (`fi_write`). The completion (`RMA|WRITE`) comes once the
    /// target applied the write, or with [`Error::RemoteAccess`] if the
    /// target refused it; `buf` comes back in it.
    pub fn write(
        &self,
        peer: PeerAddr,
        buf: Vec<u8>,
        remote: &RemoteKey,
        offset: u64,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        self.rma_owned(peer, RmaKind::Write, buf, remote, offset, None, context)
    }

    /// Like [`write`](Self::write), and the target's completion queue gets
    /// an entry (`RMA|REMOTE_WRITE|REMOTE_CQ_DATA`) carrying `data`
    /// (`fi_writedata`); it consumes no receive at the target.
    pub fn write_data(
        &self,
        peer: PeerAddr,
        buf: Vec<u8>,
        remote: &RemoteKey,
        offset: u64,
        data: u64,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        self.rma_owned(peer, RmaKind::Write, buf, remote, offset, Some(data), context)
    }

    /// Reads `buf.len()` bytes of the remote region `remote` from `offset`
    /// into `buf` (`fi_read`); the completion (`RMA|READ`) returns `buf`.
    pub fn read(
        &self,
        peer: PeerAddr,
        buf: Vec<u8>,
        remote: &RemoteKey,
        offset: u64,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        self.rma_owned(peer, RmaKind::Read, buf, remote, offset, None, context)
    }

    /// Starts remote atomic `op` (`fi_atomic` and friends with a count of
    /// one). Refused with [`Error::InvalidArgument`] for a bitwise operation
    /// on a floating-point type or a `Read` that does not fetch, and with
    /// [`Error::NotSupported`] by a provider without atomics.
    pub fn post_atomic(&self, op: AtomicOp) -> std::result::Result<(), Rejected<AtomicOp>> {
        if !op.dt.allows(op.kind) {
            return Err(Rejected::new(
                Error::InvalidArgument("bitwise atomics need an integer datatype"),
                op,
            ));
        }
        if op.kind == AtomicKind::Read && !op.fetch {
            return Err(Rejected::new(Error::InvalidArgument("an atomic read must fetch"), op));
        }
        let peer = op.peer;
        self.submit(op, None, true, Some(peer), |ep, cx, op| ep.atomic(cx, op))
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic_at(
        &self,
        peer: PeerAddr,
        kind: AtomicKind,
        dt: Datatype,
        (operand, compare): (u64, u64),
        remote: &RemoteKey,
        offset: u64,
        (fetch, level): (bool, CompletionLevel),
        context: u64,
    ) -> Result<()> {
        let op = AtomicOp {
            peer,
            kind,
            dt,
            operand,
            compare,
            addr: self.remote_addr(remote, offset)?,
            key: remote.key(),
            fetch,
            level,
            context,
        };
        self.post_atomic(op).map_err(|r| r.error)
    }

    /// Applies `kind` with `operand` (the value's bits; a 32-bit type in the
    /// low half) to the element of type `dt` at `offset` in the remote region
    /// (`fi_atomic`). The completion (`ATOMIC|WRITE`) comes once the atomic
    /// is handed to the transport ([`CompletionLevel::Inject`], as UCX's
    /// `ucp_atomic_op_nbx` without a reply and libfabric's default): later
    /// operations to the same peer are applied after it, so a fetch that
    /// follows sees it. A target's refusal comes after that completion: it
    /// is counted (the endpoint's `atomics_refused_after_completion`
    /// counter) and logged; [`atomic_delivered`](Self::atomic_delivered)
    /// reports it in the completion instead.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &self,
        peer: PeerAddr,
        kind: AtomicKind,
        dt: Datatype,
        operand: u64,
        remote: &RemoteKey,
        offset: u64,
        context: u64,
    ) -> Result<()> {
        let how = (false, CompletionLevel::Inject);
        self.atomic_at(peer, kind, dt, (operand, 0), remote, offset, how, context)
    }

    /// Like [`atomic`](Self::atomic), completed once the target applied it
    /// or refused it (`FI_DELIVERY_COMPLETE`): a refusal (unknown key,
    /// outside the region, no remote write access, misaligned) is the
    /// completion's error. Costs the target's answer, a round trip.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic_delivered(
        &self,
        peer: PeerAddr,
        kind: AtomicKind,
        dt: Datatype,
        operand: u64,
        remote: &RemoteKey,
        offset: u64,
        context: u64,
    ) -> Result<()> {
        let how = (false, CompletionLevel::Delivery);
        self.atomic_at(peer, kind, dt, (operand, 0), remote, offset, how, context)
    }

    /// Like [`atomic`](Self::atomic), and the completion (`ATOMIC|READ`)
    /// carries the element's old value in `data` (`fi_fetch_atomic`:
    /// fetch-and-add with `Sum`, swap with `Write`, a read with `Read`).
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_atomic(
        &self,
        peer: PeerAddr,
        kind: AtomicKind,
        dt: Datatype,
        operand: u64,
        remote: &RemoteKey,
        offset: u64,
        context: u64,
    ) -> Result<()> {
        let how = (true, CompletionLevel::Delivery);
        self.atomic_at(peer, kind, dt, (operand, 0), remote, offset, how, context)
    }

    /// Compare-and-swap (`fi_compare_atomic` with `FI_CSWAP`): the element
    /// becomes `swap` if it equals `compare`; the completion's `data` is its
    /// old value (equal to `compare` when it swapped).
    #[allow(clippy::too_many_arguments)]
    pub fn compare_atomic(
        &self,
        peer: PeerAddr,
        dt: Datatype,
        compare: u64,
        swap: u64,
        remote: &RemoteKey,
        offset: u64,
        context: u64,
    ) -> Result<()> {
        self.atomic_at(
            peer,
            AtomicKind::Cswap,
            dt,
            (swap, compare),
            remote,
            offset,
            (true, CompletionLevel::Delivery),
            context,
        )
    }

    /// Copies `payload` and writes it to `remote` at `offset` with no
    /// completion, even if the target refuses it (`fi_inject_write`). At most
    /// the endpoint's `inject_size`.
    pub fn inject_write(&self, peer: PeerAddr, payload: &[u8], remote: &RemoteKey, offset: u64) -> Result<()> {
        self.inject_rma(peer, payload, remote, offset, None)
    }

    /// Like [`inject_write`](Self::inject_write), and the target's
    /// completion queue gets the `RMA|REMOTE_WRITE|REMOTE_CQ_DATA` entry
    /// carrying `data` that [`write_data`](Self::write_data) makes
    /// (`fi_inject_writedata`). The initiator gets no completion; a refused
    /// write reports nothing on either side.
    pub fn inject_write_data(
        &self,
        peer: PeerAddr,
        payload: &[u8],
        remote: &RemoteKey,
        offset: u64,
        data: u64,
    ) -> Result<()> {
        self.inject_rma(peer, payload, remote, offset, Some(data))
    }

    fn inject_rma(
        &self,
        peer: PeerAddr,
        payload: &[u8],
        remote: &RemoteKey,
        offset: u64,
        data: Option<u64>,
    ) -> Result<()> {
        let (addr, key) = (self.remote_addr(remote, offset)?, remote.key());
        self.shared
            .lock()?
            .with_ep(self.key, |ep, cx| ep.inject_write(cx, peer, addr, key, data, payload))
    }

    /// Sends `buf` as an untagged message to `peer`.
    #[inline]
    pub fn send(&self, peer: PeerAddr, buf: Vec<u8>, context: u64) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let op = SendOp {
            peer,
            tag: None,
            data: None,
            buf: buf.into(),
            context,
            completion: true,
            level: CompletionLevel::Inject,
        };
        self.post_send(op).map_err(give_back_send)
    }

    /// Sends `buf` as a message tagged `tag` to `peer`.
    #[inline]
    pub fn tsend(
        &self,
        peer: PeerAddr,
        tag: u64,
        buf: Vec<u8>,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let op = SendOp {
            peer,
            tag: Some(tag),
            data: None,
            buf: buf.into(),
            context,
            completion: true,
            level: CompletionLevel::Inject,
        };
        self.post_send(op).map_err(give_back_send)
    }

    /// Receives an untagged message from `src` ([`PeerAddr::UNSPEC`]: any
    /// source) into `buf`; the completion's `len` says how much arrived.
    #[inline]
    pub fn recv(&self, src: PeerAddr, buf: Vec<u8>, context: u64) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let spec = RecvSpec { src, tag: 0, ignore: 0 };
        let op = RecvOp {
            spec,
            tagged: false,
            buf: buf.into(),
            context,
        };
        self.post_recv(op).map_err(give_back_recv)
    }

    /// Receives a tagged message whose tag equals `tag` in every bit not set
    /// in `ignore`, from `src` ([`PeerAddr::UNSPEC`]: any source).
    #[inline]
    pub fn trecv(
        &self,
        src: PeerAddr,
        tag: u64,
        ignore: u64,
        buf: Vec<u8>,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let spec = RecvSpec { src, tag, ignore };
        let op = RecvOp {
            spec,
            tagged: true,
            buf: buf.into(),
            context,
        };
        self.post_recv(op).map_err(give_back_recv)
    }

    /// Copies `payload` and sends it untagged; no completion is reported and
    /// `payload` may be reused at once. At most the endpoint's `inject_size`.
    pub fn inject(&self, peer: PeerAddr, payload: &[u8]) -> Result<()> {
        self.inject_msg(peer, None, None, payload)
    }

    /// Like [`inject`](Self::inject), tagged.
    pub fn tinject(&self, peer: PeerAddr, tag: u64, payload: &[u8]) -> Result<()> {
        self.inject_msg(peer, Some(tag), None, payload)
    }

    /// Like [`inject`](Self::inject), with immediate data: the receive
    /// completes with `REMOTE_CQ_DATA` and `data` (`fi_injectdata`).
    pub fn inject_data(&self, peer: PeerAddr, payload: &[u8], data: u64) -> Result<()> {
        self.inject_msg(peer, None, Some(data), payload)
    }

    /// Like [`tinject`](Self::tinject), with immediate data (`fi_tinjectdata`).
    pub fn tinject_data(&self, peer: PeerAddr, tag: u64, payload: &[u8], data: u64) -> Result<()> {
        self.inject_msg(peer, Some(tag), Some(data), payload)
    }

    /// Like [`tinject`](Self::tinject), of a payload given as `parts`, one
    /// after another (`fi_tinject` of a gathered buffer): the TCP transport
    /// writes them to its socket as they are, with no copy into one buffer
    /// first, unless they must wait (a full socket, a connection not yet
    /// up), when they are copied. At most the endpoint's `inject_size` in
    /// all ([`Error::InvalidArgument`] otherwise); [`Error::Again`] while
    /// the peer's credit cannot take them.
    pub fn tinjectv(&self, peer: PeerAddr, tag: u64, parts: &[std::io::IoSlice<'_>]) -> Result<()> {
        self.shared
            .lock()?
            .with_ep(self.key, |ep, cx| ep.inject_parts(cx, peer, Some(tag), None, parts))
    }

    fn inject_msg(&self, peer: PeerAddr, tag: Option<u64>, data: Option<u64>, payload: &[u8]) -> Result<()> {
        self.shared
            .lock()?
            .with_ep(self.key, |ep, cx| ep.inject(cx, peer, tag, data, payload))
    }

    /// Cancels the posted receive whose context is `context`; it completes
    /// with [`Error::Canceled`]. Fails with [`Error::NotFound`] (`-FI_ENOENT`,
    /// as `fi_cancel`) when no receive with that context is waiting: it may
    /// have matched or completed already, or was never posted.
    pub fn cancel(&self, context: u64) -> Result<()> {
        self.shared.lock()?.with_ep(self.key, |ep, cx| ep.cancel(cx, context))
    }
}

fn give_back_send(r: Rejected<SendOp>) -> Rejected<Vec<u8>> {
    Rejected::new(r.error, r.op.buf.into_vec().unwrap_or_default())
}

fn give_back_recv(r: Rejected<RecvOp>) -> Rejected<Vec<u8>> {
    Rejected::new(r.error, r.op.buf.into_vec().unwrap_or_default())
}

impl<T> From<Rejected<T>> for Error {
    fn from(r: Rejected<T>) -> Error {
        r.error
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("name", &self.name).finish()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.cq.unwatch(self.fd);
        let mut st = match self.shared.lock() {
            Ok(st) => st,
            Err(e) => {
                crate::error_limited!(error = %e, "endpoint dropped where its domain cannot be entered; its resources stay until the domain closes");
                return;
            }
        };
        st.with_ep(self.key, |ep, cx| ep.close(cx));
        st.eps.remove(self.key);
        let cq = self.cq.key();
        st.bound[cq].retain(|&e| e != self.key);
    }
}
