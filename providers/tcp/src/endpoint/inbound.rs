//! Inbound path of the TCP endpoint: reading connections, parsing frames,
//! matching arrivals against posted receives, eager and rendezvous receives.

use xfer_core::unstable::rdm::admit;

use super::*;
use crate::link::{self, Event};

impl TcpEndpoint {
    /// Reads and processes the frames that arrived on connection `id`.
    ///
    /// Whatever is staged is processed first, then after every read, so a
    /// read that finds nothing (the socket drained) leaves nothing behind:
    /// epoll reports the socket again only if more arrives.
    ///
    /// Inlined, with the read under it, so that no frame but `progress`
    /// spans the busy poll's `recv` (decision 72).
    #[inline(always)]
    pub(super) fn read_inbound(&mut self, cx: &mut Ctx<'_>, id: usize) {
        if let Err(e) = self.consume(cx, id) {
            return self.fail_conn(cx, id, e);
        }
        for _ in 0..READS_PER_EVENT {
            if !self.conns.contains(id) {
                return;
            }
            let (io, asked) = match self.direct_target(id) {
                Some((want, kind)) => (self.read_direct(cx, id, want, kind), usize::MAX),
                None => {
                    let conn = &mut self.conns[id];
                    let room = conn.staging.len() - conn.end + conn.start;
                    (conn.fill(), room)
                }
            };
            match io {
                Ok(Io::WouldBlock) => return,
                Ok(Io::Done(0)) => {
                    let _ = self.consume(cx, id);
                    // Before the HelloAck, between frames or in one (`link`).
                    let Some(c) = self.conns.get(id) else { return };
                    let mid_frame = !matches!(c.rx, Phase::Header) || !c.staged().is_empty();
                    let cause = c.link.handle_eof(mid_frame).into();
                    return self.fail_conn(cx, id, cause);
                }
                Ok(Io::Done(n)) => {
                    self.conns[id].silence.heard();
                    // The read's bytes (staged, or a finished direct read)
                    // are processed before the next read.
                    if let Err(e) = self.consume(cx, id) {
                        return self.fail_conn(cx, id, e);
                    }
                    if n < asked && asked != usize::MAX {
                        // Short read: the socket is drained; epoll reports more.
                        return;
                    }
                }
                Err(e) => return self.fail_conn(cx, id, e),
            }
        }
        // Out of budget, perhaps not drained: no new event will say so.
        self.unread = true;
    }

    /// When the next payload bytes may be read straight into user memory:
    /// how many, and where they go. The read loop asks before every read
    /// and almost always hears `None` at once (bytes staged, or a header
    /// next): that much is inlined, the payload phases are looked at out of
    /// line.
    #[inline(always)]
    pub(super) fn direct_target(&self, id: usize) -> Option<(usize, Direct)> {
        let conn = &self.conns[id];
        if !conn.staged().is_empty() || matches!(conn.rx, Phase::Header) {
            return None;
        }
        self.direct_phase(conn)
    }

    /// [`direct_target`](Self::direct_target) of a connection in a payload phase.
    #[inline(never)]
    fn direct_phase(&self, conn: &Conn) -> Option<(usize, Direct)> {
        let want = match &conn.rx {
            Phase::Eager(EagerRx {
                dest: EagerDest::Posted(op),
                got,
                olen,
                ..
            }) => (op.buf.len().min(*olen).saturating_sub(*got), Direct::Eager),
            Phase::Data { left, .. } => (*left, Direct::Rndv),
            Phase::RmaWrite(w) if w.status == status::OK => {
                (usize::try_from(w.len - w.got).unwrap_or(usize::MAX), Direct::RmaWrite)
            }
            Phase::ReadData { token, left } if self.rma.key_of(*token).is_some() => (*left, Direct::ReadData),
            _ => return None,
        };
        (want.0 >= DIRECT_READ).then_some(want)
    }

    pub(super) fn read_direct(&mut self, cx: &mut Ctx<'_>, id: usize, want: usize, kind: Direct) -> Result<Io> {
        let conn = &mut self.conns[id];
        let io;
        match &mut conn.rx {
            Phase::RmaWrite(w) if kind == Direct::RmaWrite => {
                let addr = w.addr + w.got; // within the checked region
                let ptr = match cx.domain.remote_target(w.key, addr, want as u64, Access::REMOTE_WRITE) {
                    Ok(ptr) => ptr,
                    Err(_) => {
                        // Deregistered mid-transfer: discard the rest (staged reads).
                        w.status = status::DEREGISTERED;
                        return Ok(Io::WouldBlock);
                    }
                };
                // SAFETY: `remote_target` checked that a live registration
                // allowing remote writes covers `want` bytes at `ptr`; it stays
                // registered while the domain lock is held (this whole call).
                let dest = unsafe { std::slice::from_raw_parts_mut(ptr, want) };
                io = conn.sock.recv(dest)?;
                if let Io::Done(n) = io {
                    w.got += n as u64;
                }
            }
            Phase::ReadData { token, left } if kind == Direct::ReadData => {
                let Some(key) = self.rma.key_of(*token) else {
                    return Err(Error::Internal("a direct read for an ended RMA read"));
                };
                let r = &mut self.rma[key];
                io = conn.sock.recv(&mut r.op.buf.as_mut_slice()[r.got..r.got + want])?;
                if let Io::Done(n) = io {
                    r.got += n;
                    *left -= n;
                }
            }
            Phase::Eager(EagerRx {
                dest: EagerDest::Posted(op),
                got,
                ..
            }) if kind == Direct::Eager => {
                io = conn.sock.recv(&mut op.buf.as_mut_slice()[*got..*got + want])?;
                if let Io::Done(n) = io {
                    *got += n;
                }
            }
            Phase::Data { key, left } if kind == Direct::Rndv => {
                let r = &mut self.rndv[*key];
                io = conn.sock.recv(&mut r.recv.buf.as_mut_slice()[r.got..r.got + want])?;
                if let Io::Done(n) = io {
                    r.got += n;
                    *left -= n;
                }
            }
            _ => return Ok(Io::WouldBlock),
        }
        Ok(io)
    }

    /// Processes staged bytes of connection `id` as far as they go. The
    /// common empty case (nothing staged, no frame half-read) is decided
    /// here, inlined, without entering the large frame loop.
    #[inline(always)]
    pub(super) fn consume(&mut self, cx: &mut Ctx<'_>, id: usize) -> Result<()> {
        match self.conns.get(id) {
            Some(c) if c.start != c.end || !matches!(c.rx, Phase::Header) => self.consume_frames(cx, id),
            _ => Ok(()),
        }
    }

    /// Connection `id`'s Hello from `peer` is accepted (and proven, with a
    /// job key; its HelloAck is queued): the connection has its peer.
    #[cold]
    fn open_accepted(&mut self, cx: &mut Ctx<'_>, id: usize, peer: Address) {
        self.conns[id].peer = Some(peer);
        self.peer_up(cx, peer);
        // Answer on this connection unless we already opened our own.
        let own = *self.route.entry(peer).or_insert(id);
        tracing::debug!(?peer, "peer connected");
        if own != id && self.conns.contains(id) {
            self.resolve_crossing(cx, peer, own, id);
        }
    }

    /// A handshake frame at the head of connection `id`'s staged bytes, or
    /// any frame before it is open (off the data path): the connection's
    /// lifecycle machine (`link`) judges it, and this drives what it
    /// decides. True once a frame was handled, false while it is not all
    /// staged.
    #[cold]
    fn handshake_frame(&mut self, cx: &mut Ctx<'_>, id: usize) -> Result<bool> {
        let now = Instant::now();
        let conn = &mut self.conns[id];
        let staged = &conn.staging[conn.start..conn.end];
        let used = match conn.link.handle_bytes(&self.local, staged) {
            Ok(used) => used,
            Err(f) => return Err(self.link_failed(id, f)),
        };
        conn.consume(used);
        conn.take_transmits();
        while let Some(event) = self.conns.get_mut(id).and_then(|c| c.link.poll_event()) {
            match event {
                Event::Hello(peer) => {
                    let conn = &mut self.conns[id];
                    if !conn.share.admit(&mut self.account, credit::ADMISSION) {
                        self.counted.rx_memory_refused += 1;
                        xfer_core::warn_limited!(%peer, committed = self.account.committed(), limit = self.account.limit(),
                            "peer refused: receive memory (XFER_RX_MEMORY) exhausted");
                        return Err(Error::Os(libc::ENOBUFS));
                    }
                    if let Err(f) = conn.link.admit(&self.local, now, admit::challenge) {
                        return Err(self.link_failed(id, f));
                    }
                    conn.take_transmits();
                    if conn.link.awaits_proof() {
                        self.admitting += 1;
                    }
                }
                Event::Admitted { peer, proven } => {
                    if proven {
                        self.admitting -= 1;
                    }
                    self.open_accepted(cx, id, peer);
                }
                Event::Connected(name) => {
                    self.connecting -= 1;
                    tracing::debug!(peer = ?name, "connected");
                    self.peer_up(cx, name);
                }
            }
        }
        if self.conns.contains(id) {
            // The handshake's answer, or what waited for the HelloAck.
            if self.progressing {
                burst::defer(&mut self.deferred, &mut self.conns[id], id);
            } else {
                self.flush(cx, id);
            }
        }
        Ok(used > 0)
    }

    /// The frame header at the head of connection `id`'s staged bytes, and
    /// whatever of its payload is staged too: true when a frame was handled
    /// (the loop goes on), false when it is not all staged yet.
    #[inline(always)]
    fn header(&mut self, cx: &mut Ctx<'_>, id: usize) -> Result<bool> {
        let conn = &mut self.conns[id];
        let staged = conn.staged();
        if staged.len() < HEADER_LEN {
            return Ok(false);
        }
        let frame = Frame::parse(staged).map_err(|e| Error::Protocol(e.as_str()))?;
        if link::is_handshake(&frame) || !conn.link.is_open() {
            return self.handshake_frame(cx, id);
        }
        let Some(peer) = conn.peer else {
            return Err(Error::Internal("an open connection without a peer"));
        };
        // A write with immediate data: its 8 bytes come first.
        let mut imm = None;
        if let Frame::WriteReq { imm: true, .. } = frame {
            let Some(b) = conn.staged().get(HEADER_LEN..HEADER_LEN + 8) else {
                return Ok(false);
            };
            let mut word = [0u8; 8];
            word.copy_from_slice(b);
            imm = Some(u64::from_le_bytes(word));
            conn.consume(8);
        }
        conn.consume(HEADER_LEN);
        let serial = conn.serial;
        if let Frame::Eager { tag, data, len, ack } = frame {
            return self.on_eager(cx, id, peer, (tag, data, ack), len);
        }
        let next = match frame {
            Frame::WriteReq { .. } | Frame::ReadReq { .. } | Frame::ReadResp { .. } | Frame::WriteAck { .. } => {
                self.on_rma_frame(cx, peer, frame, imm)?
            }
            _ => self.on_frame(cx, (id, serial), peer, frame)?,
        };
        // `rx` is still Header; a frame with more to read sets what follows.
        if !matches!(next, Phase::Header) {
            if let Some(conn) = self.conns.get_mut(id) {
                conn.rx = next;
            }
        }
        Ok(true)
    }

    /// The frame loop behind [`consume`](Self::consume); kept out of line so
    /// that the empty check inlines into its callers.
    #[inline(never)]
    fn consume_frames(&mut self, cx: &mut Ctx<'_>, id: usize) -> Result<()> {
        loop {
            let Some(conn) = self.conns.get_mut(id) else {
                return Ok(());
            };
            // A header is read in place: the phase is moved out (and back)
            // only when a frame's payload is under way.
            if matches!(conn.rx, Phase::Header) {
                if !self.header(cx, id)? {
                    return Ok(());
                }
                continue;
            }
            match std::mem::take(&mut conn.rx) {
                // Not reached (checked above); the next turn reads the header.
                Phase::Header => {}
                Phase::Eager(e) => {
                    if !self.eager_bytes(cx, id, e) {
                        return Ok(());
                    }
                }
                Phase::RmaWrite(mut w) => {
                    let staged = conn.staged();
                    let take = (staged.len() as u64).min(w.len - w.got) as usize;
                    if w.status == status::OK && take > 0 {
                        let addr = w.addr + w.got; // within the checked region
                        match cx.domain.remote_target(w.key, addr, take as u64, Access::REMOTE_WRITE) {
                            // SAFETY: `remote_target` checked that a live
                            // registration allowing remote writes covers `take`
                            // bytes at `ptr`; it stays registered while the
                            // domain lock is held (this whole call), and the
                            // staging buffer does not overlap registered memory.
                            Ok(ptr) => unsafe { std::ptr::copy_nonoverlapping(staged.as_ptr(), ptr, take) },
                            Err(_) => w.status = status::DEREGISTERED,
                        }
                    }
                    w.got += take as u64;
                    conn.consume(take);
                    if w.got < w.len {
                        conn.rx = Phase::RmaWrite(w);
                        return Ok(());
                    }
                    self.finish_write(cx, w);
                }
                Phase::ReadData { token, left } => {
                    let staged = conn.staged();
                    let take = staged.len().min(left);
                    let key = self.rma.key_of(token);
                    // Else the read failed meanwhile: its data is only discarded.
                    if let Some(r) = key.map(|k| &mut self.rma[k]) {
                        r.op.buf.as_mut_slice()[r.got..r.got + take].copy_from_slice(&staged[..take]);
                        r.got += take;
                    }
                    conn.consume(take);
                    if take < left {
                        conn.rx = Phase::ReadData {
                            token,
                            left: left - take,
                        };
                        return Ok(());
                    }
                    if let Some(key) = key {
                        let r = self.rma.remove(key);
                        complete::rma(&mut cx.cq, self.attr.selective_completion, r.op, Ok(()));
                    }
                }
                Phase::Data { key, left } => {
                    let staged = conn.staged();
                    let take = staged.len().min(left);
                    let r = &mut self.rndv[key];
                    r.recv.buf.as_mut_slice()[r.got..r.got + take].copy_from_slice(&staged[..take]);
                    r.got += take;
                    conn.consume(take);
                    if take < left {
                        conn.rx = Phase::Data { key, left: left - take };
                        return Ok(());
                    }
                    if r.got == r.accepted {
                        let from = conn.peer;
                        let r = self.rndv.remove(key);
                        let a = Arrival {
                            len: r.got,
                            olen: r.olen,
                            tag: r.tag,
                            data: r.data,
                            src: r.src,
                        };
                        match from {
                            Some(from) => complete::recv_from(&mut cx.cq, r.recv, a, &from, self.attr.source_err),
                            None => complete::recv(&mut cx.cq, r.recv, a, None),
                        }
                        if let (Some(token), Some(from)) = (r.ack, from) {
                            self.acknowledge(cx, &from, token);
                        }
                    }
                }
            }
        }
    }

    /// Copies the staged payload bytes of eager message `e` on connection
    /// `id`; finishes it once whole (true), or parks it as the connection's
    /// phase until more bytes arrive (false: nothing more is staged).
    pub(super) fn eager_bytes(&mut self, cx: &mut Ctx<'_>, id: usize, mut e: EagerRx) -> bool {
        let Some(conn) = self.conns.get_mut(id) else {
            if let EagerDest::Posted(op) = e.dest {
                let err = Error::PeerUnreachable {
                    peer: e.src,
                    errno: libc::ECONNRESET,
                };
                complete::recv_failed(&mut cx.cq, op, err);
            }
            return false;
        };
        let staged = conn.staged();
        let take = staged.len().min(e.olen - e.got);
        match &mut e.dest {
            EagerDest::Posted(op) => {
                let buf = op.buf.as_mut_slice();
                // Past the buffer's end (truncation) bytes are only counted.
                let start = e.got.min(buf.len());
                let fit = (buf.len() - start).min(take);
                buf[start..start + fit].copy_from_slice(&staged[..fit]);
            }
            EagerDest::Unexpected(v) => v.extend_from_slice(&staged[..take]),
        }
        e.got += take;
        conn.consume(take);
        if e.got < e.olen {
            conn.rx = Phase::Eager(e);
            return false;
        }
        self.finish_eager(cx, id, e);
        true
    }

    /// The address-vector handle of `peer`, the peer of connection `id`.
    fn src_of(&mut self, cx: &Ctx<'_>, id: usize, peer: &Address) -> PeerAddr {
        let Some(conn) = self.conns.get_mut(id) else {
            return reverse(cx.av, peer);
        };
        conn.src_hint = reverse_hinted(cx.av, peer, conn.src_hint);
        conn.src_hint
    }

    /// Handles a parsed header (hello excluded); returns what follows it.
    pub(super) fn on_frame(
        &mut self,
        cx: &mut Ctx<'_>,
        conn: (usize, u64),
        peer: Address,
        frame: Frame,
    ) -> Result<Phase> {
        match frame {
            Frame::Hello { .. } => Err(Error::Protocol("second hello on a connection")),
            Frame::Credit { bytes } => {
                self.on_credit(cx, conn.0, bytes)?;
                Ok(Phase::Header)
            }
            Frame::HelloAck { .. } | Frame::Challenge { .. } | Frame::Proof => {
                Err(Error::Protocol("handshake frame out of place"))
            }
            Frame::Ping => {
                self.send_control(cx, conn.0, Frame::Pong);
                Ok(Phase::Header)
            }
            // Reading it was the sign of life (`stall`).
            Frame::Pong => Ok(Phase::Header),
            Frame::WriteReq { .. } | Frame::ReadReq { .. } | Frame::ReadResp { .. } | Frame::WriteAck { .. } => {
                Err(Error::Internal("RMA frame outside on_rma_frame"))
            }
            Frame::Eager { .. } => Err(Error::Internal("Eager frame outside on_eager")),
            Frame::Rts {
                tag,
                data,
                len,
                token,
                ack,
            } => {
                let c = self
                    .conns
                    .get_mut(conn.0)
                    .ok_or(Error::Internal("request on a gone connection"))?;
                credit::charge(c, 0)?;
                let src = self.src_of(cx, conn.0, &peer);
                let t = tag.unwrap_or(0);
                match self.recvs.take_posted(tag.is_some(), src, t) {
                    Some((_, op)) => {
                        // The clear-to-send first: it is what the sender waits for.
                        self.start_rndv(cx, op, conn, (token, ack), len, t, data, src);
                        self.earn_credit(cx, conn.0, Some(conn.1), 0);
                    }
                    None => {
                        if let Some(c) = self.conns.get_mut(conn.0) {
                            c.requests.arrive(token)?;
                        }
                        self.hold(conn.0, 0);
                        self.recvs.arrive(
                            tag.is_some(),
                            src,
                            t,
                            Unexpected::Rts {
                                from: peer,
                                len,
                                data,
                                handle: RtsTicket { conn, token, ack },
                            },
                        );
                    }
                }
                Ok(Phase::Header)
            }
            Frame::Cts { token, rx_token, len } => {
                let key = self.answer_send(&peer, token, Answer::Clear)?;
                let Some(key) = key else { return Ok(Phase::Header) };
                let tx = &mut self.sends[key];
                let len = usize::try_from(len).ok().filter(|&l| l <= tx.op.buf.len());
                let Some(len) = len else {
                    // The send it names can never finish: drop the connection it
                    // went out on as well, which ends it (and its siblings) with the error.
                    let err = Error::Protocol("clear-to-send longer than the message");
                    let out = tx.conn.0;
                    self.fail_conn(cx, out, err.clone());
                    return Err(err);
                };
                let out = tx.conn.0;
                if len == 0 {
                    let tx = self.sends.remove(key);
                    complete::send(&mut cx.cq, self.attr.selective_completion, tx.op, Ok(()));
                } else {
                    let hdr = Frame::Data {
                        rx_token,
                        offset: 0,
                        len: len as u64,
                    }
                    .to_bytes();
                    let payload = Payload::Op { key, offset: 0, len };
                    self.queue(
                        cx,
                        out,
                        TxFrame {
                            hdr,
                            payload,
                            written: 0,
                            owner: Owner::Send(key),
                        },
                    );
                }
                Ok(Phase::Header)
            }
            Frame::Delivered { token } => {
                let Some(key) = self.answer_send(&peer, token, Answer::Delivered)? else {
                    return Ok(Phase::Header);
                };
                let tx = self.sends.remove(key);
                complete::send(&mut cx.cq, self.attr.selective_completion, tx.op, Ok(()));
                Ok(Phase::Header)
            }
            Frame::Data { rx_token, offset, len } => {
                let (key, r) = match self.rndv.by_token(rx_token) {
                    Some((key, r)) if r.conn == conn => (key, r),
                    _ => return Err(Error::Protocol("data for no matched rendezvous receive")),
                };
                let end = offset.checked_add(len).filter(|&e| e <= r.accepted as u64);
                if offset != r.got as u64 || end.is_none() {
                    return Err(Error::Protocol(
                        "rendezvous data out of order or past the accepted length",
                    ));
                }
                Ok(Phase::Data {
                    key,
                    left: len as usize,
                })
            }
        }
    }

    /// An eager message of `a.olen` bytes from `from` that came on the live
    /// connection `id` is in `op`'s buffer (what fits): completes it, earns
    /// its credit.
    fn complete_posted(&mut self, cx: &mut Ctx<'_>, id: usize, op: RecvOp, a: Arrival, from: &Address) {
        let len = op.buf.len().min(a.olen);
        complete::recv_from(&mut cx.cq, op, Arrival { len, ..a }, from, self.attr.source_err);
        self.earn_credit(cx, id, None, a.olen);
    }

    /// The send a peer's `answer` about `token` moves on: live, gone to
    /// `peer`, and waiting for that answer. `None`: the send failed with the
    /// connection its request or data went out on, and this is the answer
    /// it was still owed (dropped); any other answer is a violation.
    fn answer_send(&mut self, peer: &Address, token: u64, answer: Answer) -> Result<Option<usize>> {
        if let Some(key) = self.sends.key_of(token) {
            let tx = &mut self.sends[key];
            if tx.dest == *peer && tx.state.answer(answer).is_ok() {
                return Ok(Some(key));
            }
        }
        match self.abandoned.take(peer, token, |owed| owed == Owed::Send(answer)) {
            true => Ok(None),
            false => Err(answer.unexpected()),
        }
    }

    /// An eager message was read whole: complete its receive, or find one
    /// posted meanwhile, or queue it as unexpected.
    /// `id` is the connection it came on, which is alive (its bytes were
    /// just read).
    pub(super) fn finish_eager(&mut self, cx: &mut Ctx<'_>, id: usize, e: EagerRx) {
        let (ack, from) = (e.ack, e.from);
        let a = Arrival {
            len: e.olen,
            olen: e.olen,
            tag: e.tag,
            data: e.data,
            src: e.src,
        };
        match e.dest {
            EagerDest::Posted(op) => self.complete_posted(cx, id, op, a, &e.from),
            EagerDest::Unexpected(payload) => match self.recvs.take_posted(e.tagged, e.src, e.tag) {
                Some((_, op)) => {
                    complete::recv_copy(&mut cx.cq, op, &payload, a, (&e.from, self.attr.source_err));
                    self.earn_credit(cx, id, None, e.olen);
                }
                None => {
                    let conn = (id, self.conns.get(id).map_or(0, |c| c.serial));
                    self.hold(id, e.olen);
                    self.recvs.arrive(
                        e.tagged,
                        e.src,
                        e.tag,
                        Unexpected::Eager {
                            from: e.from,
                            conn,
                            data: e.data,
                            payload,
                        },
                    );
                }
            },
        }
        if let Some(token) = ack {
            // Read whole, it is this endpoint's (placed, or kept until a
            // receive takes it): the sender's acknowledged send completes.
            self.acknowledge(cx, &from, token);
        }
    }

    /// A receive matched a rendezvous request: accept what fits, answer clear-to-send.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_rndv(
        &mut self,
        cx: &mut Ctx<'_>,
        op: RecvOp,
        conn: (usize, u64),
        (token, ack): (u64, bool),
        len: u64,
        tag: u64,
        data: Option<u64>,
        src: PeerAddr,
    ) {
        let olen = usize::try_from(len).unwrap_or(usize::MAX);
        let peer = match self.conns.get(conn.0) {
            Some(c) if c.serial == conn.1 => c.peer,
            _ => None,
        };
        let Some(peer) = peer else {
            let err = Error::PeerUnreachable { peer: src, errno: 0 };
            return complete::recv_failed(&mut cx.cq, op, err);
        };
        let accepted = op.buf.len().min(olen);
        let out = match self.out_conn(&peer) {
            Ok(out) => out,
            Err(e) => return complete::recv_failed(&mut cx.cq, op, op_error(&e, src)),
        };
        let a = Arrival {
            len: 0,
            olen,
            tag,
            data,
            src,
        };
        let (owner, rx_token) = if accepted == 0 {
            complete::recv_from(&mut cx.cq, op, a, &peer, self.attr.source_err);
            (Owner::None, 0)
        } else {
            let key = self.rndv.insert(RndvRx {
                recv: op,
                conn,
                olen,
                accepted,
                got: 0,
                tag,
                data,
                src,
                ack: ack.then_some(token),
            });
            (Owner::Cts(key), self.rndv.token(key))
        };
        let hdr = Frame::Cts {
            token,
            rx_token,
            len: accepted as u64,
        }
        .to_bytes();
        self.queue(
            cx,
            out,
            TxFrame {
                hdr,
                payload: Payload::None,
                written: 0,
                owner,
            },
        );
    }
}

impl TcpEndpoint {
    /// Tells `peer` that the message of its `token` is here (the Delivered
    /// frame its Eager or Rts frame asked for), on the route a Cts takes.
    pub(super) fn acknowledge(&mut self, cx: &mut Ctx<'_>, peer: &Address, token: u64) {
        match self.out_conn(peer) {
            Ok(out) => self.send_control(cx, out, Frame::Delivered { token }),
            // The peer is gone: its send fails with its connection.
            Err(e) => tracing::debug!(error = %e, "delivery acknowledgement not sent"),
        }
    }
}
