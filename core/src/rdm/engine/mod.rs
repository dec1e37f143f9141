//! The RDM engine: an [`EndpointProvider`] written once over any
//! [`Transport`]. It owns what the user's operations mean — matching in post
//! order, the unexpected store and its memory, the eager/rendezvous choice
//! and the rendezvous state, delivery acknowledgements, the peer table and
//! what a peer's failure does to every operation waiting on it — and asks the
//! transport only to connect, carry frames, pull a peer's memory and report
//! what happened.
//!
//! - [`wire`]: the engine's frame header.
//! - `peers`: the peer and connection tables.
//! - `admit`: the handshake every connection opens with, and admission by job key.
//! - `out`: frames waiting for room (or credit) on a connection, and writing them.
//! - `credit`: eager credit and the receive memory, per peer.
//! - `arrive`: what each arriving frame does.
//! - `rma`: RMA served by the target in software, checked by its key table.
//! - `atomic`: remote atomics applied by the target, checked the same way.
//! - `fail`: a connection's end, and the endpoint's close.
//! - `stall`: the progress timeout (peers alive but not progressing).
//!
//! Flow control is the layer's eager credit (`credit`): what a peer may
//! make this endpoint hold is what it was granted; the transport's own
//! back-pressure (a full ring or socket buffer) only paces the frames.

mod admit;
mod arrive;
mod atomic;
mod credit;
mod device;
mod fail;
mod idle;
mod keepalive;
mod order;
mod out;
mod peers;
mod rma;
mod stall;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod mem;
#[cfg(test)]
mod tests;

use std::io::IoSlice;
use std::os::fd::RawFd;

use crate::addr::{Address, AvTable, PeerAddr};
use crate::atomic::AtomicOp;
use crate::attr::EndpointAttr;
use crate::complete::{self, Arrival};
use crate::error::{Error, Result};
use crate::event::{PeerEvent, PeerEvents};
use crate::peek::{Claim, Peeked};
use crate::provider::{CompletionLevel, Ctx, EndpointProvider, RecvOp, Rejected, RmaOp, SendOp};
use crate::tag::RecvSpec;

use super::credit::cost;
use super::rndv::{self, Protocol, SendState};
use super::transport::{gather, Cause, ConnId, Exposed, Pulled, Remote, Transport};
use super::{Account, Counters, Outstanding, Receives, Unexpected};

use out::Out;
use peers::Peers;
use wire::{Header, Kind};

/// A rendezvous request kept unexpected: whom to pull from and answer.
#[derive(Debug, Clone, Copy)]
pub struct Rts {
    peer: (usize, u64),
    /// The connection it came on: the one its sender exposed the payload
    /// for, which is up (a frame came on it). After a crossed connect it
    /// is not the one this side sends on, which may still be opening.
    conn: ConnId,
    token: u64,
    addr: u64,
    key: Option<u64>,
}

/// A send waiting for its receiver: a rendezvous, or an acknowledged eager
/// message.
struct Send {
    op: SendOp,
    peer: (usize, u64),
    state: SendState,
    /// Its buffer as the transport exposed it for the receiver's pull: the
    /// connection and the handle to give back when the send is over.
    exposed: Option<(ConnId, u64)>,
    /// The receiver's token its payload is pushed to, once cleared.
    pushed_to: u64,
}

/// A receive the sender pushes into (the receiver could not pull, or
/// asked for the push first).
struct Push {
    /// `None` once the receiver pulled the rest: the entry stays until the
    /// sender says it pushes no more, dropping the pushed bytes that were on
    /// their way.
    op: Option<RecvOp>,
    peer: (usize, u64),
    arrival: Arrival,
    from: Address,
    send_token: u64,
    got: usize,
    /// Bytes in from the start without a gap: where a pull of the rest
    /// begins.
    end: usize,
    /// How to pull the rest, when the transport can.
    resume: Option<Resume>,
}

/// A push the receiver may finish by pulling: what it lacks once `wait`
/// passed with no pushed bytes in from its sender, since the clear-to-send.
#[derive(Clone, Copy)]
struct Resume {
    rts: Rts,
    wait: std::time::Duration,
    last: std::time::Instant,
}

/// A matched rendezvous to pull: kept in `State::pulls` when matched
/// while the transport reported frames (pulled right after), and in
/// `State::pulling` while the transport moves its bytes, which owns its
/// receive buffer until it reports the pull over.
struct Pull {
    op: RecvOp,
    peer: (usize, u64),
    arrival: Arrival,
    from: Address,
    rts: Rts,
    /// Its peer failed while the transport moved it: the error a failed
    /// pull reports (the transport's is only what the connection's end
    /// did to it).
    ended: Option<Error>,
    /// The pull of the rest of a push that stalled.
    rest: Option<Rest>,
}

/// The rest of push `push` (a key of `State::pushes`) to pull, from
/// offset `from` (the bytes before it are in).
#[derive(Clone, Copy)]
struct Rest {
    from: usize,
    push: usize,
}

/// What the engine counts besides [`Counters`].
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    pulls: u64,
    /// Pushes the receiver finished by pulling the rest (their sender
    /// stalled).
    pushes_pulled: u64,
    /// Pulls the transport reported failed.
    pulls_failed: u64,
    pushes: u64,
    protocol_errors: u64,
    /// Peers whose connect failed after they connected to us: sent to on
    /// theirs.
    crossed_over: u64,
    coalesced: u64,
    /// Refusals of atomics that had completed when sent.
    atomics_refused_after_completion: u64,
    /// Device operations atomics took (a loop's steps each), and those
    /// that failed.
    atomics_device: u64,
    atomics_device_failed: u64,
    /// RMA operations the transport did natively, and those that failed.
    rma_native: u64,
    rma_native_failed: u64,
    /// Peers' RMA operations this target served in frames.
    rma_served: u64,
}

/// Everything but the transport, so frame handling can borrow it while the
/// transport reports.
struct State {
    provider_id: u8,
    name: Address,
    /// Messages above it go by rendezvous (a connection's largest frame
    /// may lower it).
    rndv_threshold: usize,
    inject_max: usize,
    selective: bool,
    source_err: bool,
    rma_events: bool,
    peers: Peers,
    rx: Receives<Rts>,
    sends: Outstanding<Send>,
    pushes: Outstanding<Push>,
    /// Pushes in `pushes` that may still be finished by pulling.
    resumable: usize,
    rmas: Outstanding<rma::RmaTx>,
    /// Keys targets granted for native RMA.
    grants: rma::Grants,
    /// Peers sent an inject write that no answered RMA has followed yet.
    injected: Vec<(usize, u64)>,
    atomics: Outstanding<atomic::AtomicTx>,
    /// Regions targets granted to this side's device for atomics.
    atomic_grants: device::AtomicGrants,
    /// Atomics whose next device operation is due after this progress.
    device_due: Vec<u64>,
    /// Operations held for their place among their peer's RMA and
    /// atomics (`order.rs`), in the order they were posted.
    held_back: Vec<((usize, u64), order::Held)>,
    /// Peers whose transport has no device atomics: their atomics go in
    /// frames without asking for a grant.
    frames_only: Vec<(usize, u64)>,
    /// Writes (peer, token, status) that failed before their last frame.
    write_failed: Vec<((usize, u64), u64, u64)>,
    pulls: Vec<Pull>,
    /// Pulls the transport is moving, by the token it reports them with.
    pulling: Outstanding<Pull>,
    /// Exposures of sends that are over, given back after progress.
    concealed: Vec<(ConnId, u64)>,
    doomed: Vec<(ConnId, Cause)>,
    failed: Vec<((usize, u64), Cause)>,
    queued: usize,
    account: Account,
    /// What each peer is granted in all (its initial credit, then this).
    budget: super::credit::Amount,
    counted: Counters,
    stats: Stats,
    events: PeerEvents,
    watch: super::stall::Watch,
    /// The transport's keepalive ticks, when it wants them.
    keepalive: keepalive::Ticks,
    /// The job key peers must prove, and ours to prove.
    key: Option<Vec<u8>>,
    /// Accepted connections waiting for their peer's proof.
    vetting: Vec<admit::Vetting>,
    /// Handshake frames for connections no peer sends on.
    answers: Vec<(ConnId, [u8; wire::LEN], Vec<u8>)>,
    /// Frames a burst of posts may hold back (`Transport::coalesce`).
    coalesce: usize,
    /// A post wrote at once since the last progress: the next ones wait
    /// for it (or for a blocking wait), which writes them together.
    burst: bool,
    /// No wake-up was signalled for frames held back since the last flush
    /// wrote what a burst held: the next post held back signals one, so that
    /// whoever sleeps on the descriptor writes it (an async runtime's
    /// progress task parked while another task posts, then parks without
    /// driving: the queue is the parked task's to drive). Per flush rather
    /// than per `prepare_wait`: another thread's progress may take the
    /// readiness a wake-up raised (and write what it was for) after the
    /// sleeper prepared and before it parked.
    armed: bool,
    /// Connections refused for want of the job key.
    refusals: u64,
    connect_timeout: std::time::Duration,
    closed: bool,
    /// Frames taken by the transport or arrived from it, counted on: a
    /// progress call that leaves it unchanged saw nothing move.
    motion: u64,
    /// The transport refused a frame as full since this progress began.
    refused: bool,
    /// How long a wait on a peer has been still, and the yields it made.
    idle: idle::Idle,
}

/// An endpoint of the RDM layer over transport `T`.
pub struct Engine<T: Transport> {
    t: T,
    s: State,
}

impl<T: Transport> Engine<T> {
    /// An endpoint over `t`, named by `provider_id` followed by the
    /// transport's address, granting each peer `eager_credit` bytes (at
    /// least the initial credit).
    pub fn new(t: T, provider_id: u8, attr: &EndpointAttr, eager_credit: u64) -> Result<Engine<T>> {
        let mut name = vec![provider_id];
        name.extend_from_slice(t.address());
        let name = Address::new(&name)?;
        let room = t.max_payload();
        if attr.inject_size > room {
            return Err(Error::InvalidArgument("inject size over the transport's largest frame"));
        }
        Ok(Engine {
            s: State {
                provider_id,
                name,
                rndv_threshold: attr.rndv_threshold,
                inject_max: attr.inject_size,
                selective: attr.selective_completion,
                source_err: attr.source_err,
                rma_events: attr.rma_events,
                peers: Peers::new(T::stand_in),
                rx: Receives::new(),
                sends: Outstanding::new(),
                pushes: Outstanding::new(),
                resumable: 0,
                rmas: Outstanding::new(),
                grants: rma::Grants::default(),
                injected: Vec::new(),
                atomics: Outstanding::new(),
                atomic_grants: device::AtomicGrants::default(),
                device_due: Vec::new(),
                held_back: Vec::new(),
                frames_only: Vec::new(),
                write_failed: Vec::new(),
                pulls: Vec::new(),
                pulling: Outstanding::new(),
                concealed: Vec::new(),
                doomed: Vec::new(),
                failed: Vec::new(),
                queued: 0,
                account: Account::new(attr.rx_memory),
                budget: super::credit::Amount {
                    bytes: eager_credit.max(credit::INIT),
                    msgs: u32::MAX,
                },
                counted: Counters::default(),
                stats: Stats::default(),
                events: PeerEvents::new(attr.peer_events),
                watch: super::stall::Watch::new(attr.progress_timeout_ms),
                keepalive: keepalive::Ticks::new(t.keepalive()),
                key: attr.job_key.as_ref().map(|k| k.0.clone()),
                vetting: Vec::new(),
                answers: Vec::new(),
                coalesce: t.coalesce(),
                burst: false,
                armed: true,
                refusals: 0,
                connect_timeout: t.connect_timeout(),
                closed: false,
                motion: 0,
                refused: false,
                idle: idle::Idle::new(attr.yield_after_us),
            },
            t,
        })
    }

    /// The transport, for its own reports.
    pub fn transport(&self) -> &T {
        &self.t
    }
}

impl State {
    /// The peer named by `peer`'s address-vector entry, connecting (and
    /// sending our hello) when there is none yet.
    #[inline(always)]
    fn peer_for<T: Transport>(&mut self, t: &mut T, av: &AvTable, peer: PeerAddr) -> std::result::Result<usize, Error> {
        let name = av.lookup(peer).ok_or(Error::AddressNotAvailable)?;
        self.peer_named(t, peer, name)
    }

    /// [`peer_for`](Self::peer_for) with `peer`'s name already looked up
    /// (by [`accepts`](Self::accepts)).
    #[inline(always)]
    fn peer_named<T: Transport>(
        &mut self,
        t: &mut T,
        peer: PeerAddr,
        name: &Address,
    ) -> std::result::Result<usize, Error> {
        if let Some(p) = self.peers.route(peer, name) {
            return Ok(p);
        }
        self.new_peer(t, peer, *name)
    }

    /// Connects to `name`, the address vector's `peer`, and queues our
    /// hello; nothing else is written to it until it admits us.
    #[cold]
    fn new_peer<T: Transport>(
        &mut self,
        t: &mut T,
        peer: PeerAddr,
        name: Address,
    ) -> std::result::Result<usize, Error> {
        if name.as_bytes().first() != Some(&self.provider_id) {
            return Err(Error::AddressNotAvailable);
        }
        let conn = out::dial(t, &name).map_err(|c| cause_error(c, peer))?;
        let p = self.peers.add(name, conn);
        self.admit(p, false);
        self.peers.gate(p);
        self.enqueue(p, 0, admit::hello(&self.name));
        Ok(p)
    }

    /// Whether a posted operation to `peer` can start: the endpoint is open
    /// and the peer is in the address vector `av`; its name there.
    #[inline(always)]
    fn accepts<'v>(&self, av: &'v AvTable, peer: PeerAddr) -> Result<&'v Address> {
        if self.closed {
            return Err(Error::Canceled);
        }
        av.lookup(peer).ok_or(Error::AddressNotAvailable)
    }

    /// The peer an inject of `len` bytes goes to, after its size check.
    fn inject_peer<T: Transport>(&mut self, t: &mut T, cx: &Ctx<'_>, peer: PeerAddr, len: usize) -> Result<usize> {
        if len > self.inject_max {
            return Err(Error::InvalidArgument("inject payload over the endpoint's inject_size"));
        }
        self.peer_for(t, cx.av, peer)
    }

    /// Peer `p` has a connection up: it joins (once).
    fn joined(&mut self, p: usize, av: &AvTable) {
        if self.events.enabled() {
            let handle = self.peers.handle(p, av);
            if let Some(e) = self.peers.get(p) {
                self.events.up(e.name, e.name, handle);
            }
        }
    }

    #[inline]
    fn serial(&self, p: usize) -> (usize, u64) {
        (p, self.peers.get(p).map_or(0, |e| e.serial))
    }

    /// The largest message sent to peer `p` eagerly: the rendezvous
    /// threshold, or the largest frame of the connection it has (of every
    /// connection, while it has none yet).
    #[inline]
    fn eager_max_to<T: Transport>(&self, t: &T, p: usize) -> usize {
        let room = match self.peers.get(p).and_then(|e| e.tx) {
            Some(c) => t.max_payload_on(c),
            None => t.max_payload(),
        };
        self.rndv_threshold.min(room)
    }

    /// Sends `op` to the peer named `name` (its address-vector entry).
    /// Inlined into its one caller, `Engine::send`: out of line, the
    /// operation (ten words) was copied through the stack on every send.
    #[inline(always)]
    fn send<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, op: SendOp, name: &Address) {
        let p = match self.peer_named(t, op.peer, name) {
            Ok(p) => p,
            Err(e) => return complete::send(&mut cx.cq, self.selective, op, Err(e)),
        };
        let at = self.serial(p);
        let mut hdr = Header::message(Kind::Eager, op.tag, op.data);
        let bytes = cost(op.buf.len() as u64);
        let eager_max = self.eager_max_to(t, p);
        let protocol = rndv::choose(op.buf.len(), eager_max, || self.affords(p, bytes));
        if protocol == Protocol::Rendezvous && op.buf.len() <= eager_max {
            self.stalled();
        }
        match protocol {
            Protocol::Eager if op.level == CompletionLevel::Inject => {
                let h = hdr.encode();
                let n = wire::message_len(op.tag.is_some(), op.data.is_some());
                if self.write_now(t, p, bytes, &h[..n], op.buf.as_slice()) {
                    return complete::send(&mut cx.cq, self.selective, op, Ok(()));
                }
                self.enqueue(p, bytes, Out::Eager(h, op));
            }
            Protocol::Eager => {
                let mut state = SendState::start(Protocol::Eager);
                state.moved(true);
                let key = self.sends.insert(Send {
                    op,
                    peer: at,
                    state,
                    exposed: None,
                    pushed_to: 0,
                });
                hdr.flags |= wire::ACK;
                hdr.token = self.sends.token(key);
                self.enqueue(p, bytes, Out::Held(hdr.encode(), key));
            }
            Protocol::Rendezvous => {
                hdr.kind = Kind::Rts;
                hdr.len = op.buf.len() as u64;
                hdr.addr = op.buf.as_slice().as_ptr() as u64;
                let exposed = self.expose(t, p, op.buf.as_slice());
                if let Some((_, x)) = exposed {
                    hdr.flags |= wire::KEYED;
                    hdr.off = x.key;
                }
                let key = self.sends.insert(Send {
                    op,
                    peer: at,
                    state: SendState::start(Protocol::Rendezvous),
                    exposed: exposed.map(|(c, x)| (c, x.handle)),
                    pushed_to: 0,
                });
                hdr.token = self.sends.token(key);
                self.enqueue(p, cost(0), Out::Owned(hdr.encode(), Vec::new()));
            }
        }
        self.posted(t, cx, p);
    }

    /// Gives `op` the kept message it matched (or claimed).
    fn deliver<T: Transport>(
        &mut self,
        t: &mut T,
        cx: &mut Ctx<'_>,
        op: RecvOp,
        src: PeerAddr,
        tag: u64,
        msg: Unexpected<Rts>,
    ) {
        let len = msg.payload_len() as u64;
        match msg {
            Unexpected::Eager {
                from,
                conn,
                data,
                payload,
            } => {
                self.consumed(conn, cost(len), true);
                let a = Arrival {
                    len: 0,
                    olen: payload.len(),
                    tag,
                    data,
                    src,
                };
                complete::recv_copy(&mut cx.cq, op, &payload, a, (&from, self.source_err));
            }
            Unexpected::Rts {
                from,
                len,
                data,
                handle,
            } => {
                self.consumed(handle.peer, cost(0), true);
                let arrival = Arrival {
                    len: 0,
                    olen: usize::try_from(len).unwrap_or(usize::MAX),
                    tag,
                    data,
                    src,
                };
                let pull = Pull {
                    op,
                    peer: handle.peer,
                    arrival,
                    from,
                    rts: handle,
                    ended: None,
                    rest: None,
                };
                self.pull(t, cx, pull);
            }
        }
    }

    /// Exposes `buf`, a rendezvous payload to peer `p`, on the peer's
    /// connection for its pull. Nothing while the peer has no connection
    /// yet, or when the transport cannot expose it (a registration the
    /// device refused): its receiver then has it pushed.
    fn expose<T: Transport>(&mut self, t: &mut T, p: usize, buf: &[u8]) -> Option<(ConnId, Exposed)> {
        let tx = self.peers.get(p).and_then(|e| e.tx).filter(|_| !buf.is_empty())?;
        match t.expose(tx, buf) {
            Ok(x) => x.map(|x| (tx, x)),
            Err(e) => {
                crate::warn_limited!(error = %e, "rdm: a rendezvous buffer not exposed; its receiver will have it pushed");
                None
            }
        }
    }

    /// Gives the transport back the exposures of sends that are over.
    fn conceal_all<T: Transport>(&mut self, t: &mut T) {
        for (conn, handle) in std::mem::take(&mut self.concealed) {
            t.conceal(conn, handle);
        }
    }

    /// Takes a matched rendezvous: pulls it, or asks the sender to push it.
    fn pull<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>, p: Pull) {
        let Some(tx) = self.peers.current(p.peer).and_then(|e| e.tx) else {
            let e = Error::PeerClosed { peer: p.arrival.src };
            return complete::recv_failed(&mut cx.cq, p.op, e);
        };
        // Pull on the connection the request came on while it is still the
        // peer's: its sender exposed the payload there.
        let on = self.peers.link_of(p.rts.conn).and_then(|l| l.peer);
        let tx = if on == Some(p.peer.0) { p.rts.conn } else { tx };
        let n = p.arrival.olen.min(p.op.buf.len());
        let peer = p.peer.0;
        if p.rest.is_none() && n > 0 {
            if let Some(wait) = t.push_first(tx, n) {
                let resume = (wait < std::time::Duration::MAX).then(|| Resume {
                    rts: Rts { conn: tx, ..p.rts },
                    wait,
                    last: std::time::Instant::now(),
                });
                self.ask_push(p, resume);
                return self.flush(t, cx, peer);
            }
        }
        // A pull of the rest of a push starts where the pushed bytes end.
        let rest = p.rest;
        let skip = rest.map_or(0, |r| r.from).min(n);
        let remote = Remote {
            addr: p.rts.addr.wrapping_add(skip as u64),
            key: p.rts.key,
            stamp: 0,
        };
        // The receive moves into `pulling` first: its buffer (which does not
        // move with it) stays there, untouched, while the transport writes it.
        let key = self.pulling.insert(p);
        let token = self.pulling.token(key);
        let started = match n - skip {
            0 => Ok(Pulled::Done),
            len => {
                let buf = self.pulling[key].op.buf.as_mut_slice();
                let dst = buf[skip..].as_mut_ptr();
                // SAFETY: `dst..dst + len` is the end of the receive's
                // buffer, which `pulling` owns and nothing reads or writes
                // until the pull is over: now (`Done`, an error) or at its
                // `Pulled` event.
                unsafe { t.start_pull(tx, remote, dst, len, token) }
            }
        };
        match started {
            Ok(Pulled::Done) => self.pulled(token, Ok(()), cx),
            Ok(Pulled::Started) => {}
            Err(Error::NotSupported(_)) => {
                let p = self.pulling.remove(key);
                match rest {
                    None => self.ask_push(p, None),
                    // The transport lost its way to the sender's memory
                    // since it offered the pull: the push goes on (the
                    // sender was told nothing), and is waited for.
                    Some(r) => match self.pushes.get_mut(r.push) {
                        Some(push) => {
                            push.op = Some(p.op);
                            self.stats.pushes_pulled -= 1;
                        }
                        None => complete::recv_failed(&mut cx.cq, p.op, Error::NotSupported("pull")),
                    },
                }
            }
            Err(e) => self.pulled(token, Err(e), cx),
        }
        self.flush(t, cx, peer);
    }

    /// Asks the sender of the matched rendezvous `p` to push its payload
    /// (clear to send); with `resume`, this side may pull the rest if the
    /// push stalls.
    fn ask_push(&mut self, p: Pull, resume: Option<Resume>) {
        self.stats.pushes += 1;
        self.resumable += usize::from(resume.is_some());
        let key = self.pushes.insert(Push {
            op: Some(p.op),
            peer: p.peer,
            arrival: p.arrival,
            from: p.from,
            send_token: p.rts.token,
            got: 0,
            end: 0,
            resume,
        });
        let mut answer = Header::new(Kind::Cts);
        answer.token = p.rts.token;
        answer.addr = self.pushes.token(key);
        self.enqueue(p.peer.0, 0, Out::Owned(answer.encode(), Vec::new()));
    }

    /// Pulls the rest of every push whose sender delivered nothing for its
    /// wait: the sender is not running (it shares this CPU, or is
    /// descheduled), and this side would otherwise spin until it is. Any
    /// pushed bytes from the sender count: its pushes queued behind the one
    /// it is writing are not stalled.
    #[inline(never)]
    fn pull_stalled<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        let now = std::time::Instant::now();
        let peers = &self.peers;
        let stalled: Vec<usize> = self
            .pushes
            .iter()
            .filter(|(_, p)| p.op.is_some())
            .filter_map(|(key, p)| {
                let r = p.resume?;
                let heard = peers
                    .get(p.peer.0)
                    .and_then(|e| e.pushed_at)
                    .map_or(r.last, |at| at.max(r.last));
                (now.duration_since(heard) >= r.wait).then_some(key)
            })
            .collect();
        for key in stalled {
            let push = &mut self.pushes[key];
            let (Some(op), Some(r)) = (push.op.take(), push.resume.take()) else {
                continue;
            };
            self.resumable -= 1;
            self.stats.pushes_pulled += 1;
            let pull = Pull {
                op,
                peer: push.peer,
                arrival: push.arrival,
                from: push.from,
                rts: r.rts,
                ended: None,
                rest: Some(Rest {
                    from: push.end,
                    push: key,
                }),
            };
            self.pull(t, cx, pull);
        }
    }

    /// The pull under `token` is over: its receive completes (or fails,
    /// naming its peer) and the sender is told (while it is there to hear).
    fn pulled(&mut self, token: u64, result: Result<()>, cx: &mut Ctx<'_>) {
        let Some(key) = self.pulling.key_of(token) else {
            crate::warn_limited!(token, "rdm: a transport reported a pull the engine did not start");
            return;
        };
        let mut p = self.pulling.remove(key);
        let mut answer = Header::new(Kind::Fin);
        answer.token = p.rts.token;
        match result {
            Ok(()) => {
                self.stats.pulls += 1;
                let n = p.arrival.olen.min(p.op.buf.len());
                answer.len = n as u64;
                p.arrival.len = n;
                complete::recv_from(&mut cx.cq, p.op, p.arrival, &p.from, self.source_err);
            }
            Err(e) => {
                self.stats.pulls_failed += 1;
                answer.status = wire::status::FAILED;
                let peer = p.arrival.src;
                let e = match e {
                    Error::PeerClosed { .. } => Error::PeerClosed { peer },
                    Error::PeerUnreachable { errno, .. } => Error::PeerUnreachable { peer, errno },
                    e => e,
                };
                // The peer's failure, when the engine knows of it (ended, or
                // about to be), says more than what it did to the pull.
                let failing = self.failed.iter().find(|(at, _)| *at == p.peer);
                let e = p
                    .ended
                    .or_else(|| failing.map(|&(_, c)| cause_error(c, peer)))
                    .unwrap_or(e);
                complete::recv_failed(&mut cx.cq, p.op, e);
            }
        }
        if self.peers.current(p.peer).is_some() {
            self.enqueue(p.peer.0, 0, Out::Owned(answer.encode(), Vec::new()));
        }
    }

    /// Records `bytes` pushed at `off` into receive `key`; completes it (and
    /// acknowledges the sender) once every byte is in.
    fn pushed(&mut self, cx: &mut Ctx<'_>, key: usize, off: usize, b: super::transport::Bytes<'_>) {
        let Some(push) = self.pushes.get_mut(key) else { return };
        // Pulled already: bytes that were on their way are dropped.
        let Some(op) = push.op.as_mut() else { return };
        let buf = op.buf.as_mut_slice();
        if off < buf.len() {
            let end = buf.len().min(off.saturating_add(b.len()));
            b.copy_to(&mut buf[off..end]);
        }
        push.got += b.len();
        if off == push.end {
            push.end += b.len();
        }
        // Any push's bytes show its sender running, a push-only one's too
        // (the stall clocks of its pushes queued behind read it); kept
        // only while some push can stall.
        if self.resumable != 0 {
            if let Some(e) = self.peers.get_mut(push.peer.0) {
                e.pushed_at = Some(std::time::Instant::now());
            }
        }
        if push.got < push.arrival.olen {
            return;
        }
        let push = self.pushes.remove(key);
        self.resumable -= usize::from(push.resume.is_some());
        let Some(op) = push.op else { return };
        let mut arrival = push.arrival;
        arrival.len = arrival.olen.min(op.buf.len());
        let mut done = Header::new(Kind::Delivered);
        done.token = push.send_token;
        complete::recv_from(&mut cx.cq, op, arrival, &push.from, self.source_err);
        self.enqueue(push.peer.0, 0, Out::Owned(done.encode(), Vec::new()));
    }

    /// The sender of push `key` pushes no more: it was told this side
    /// pulled the rest. Its entry goes.
    fn push_stopped(&mut self, key: usize) -> std::result::Result<(), &'static str> {
        if self.pushes[key].op.is_some() {
            return Err("a push's end for a receive still taking it");
        }
        self.pushes.remove(key);
        Ok(())
    }
}

/// The error operations to `peer` report for a connection's `cause`.
fn cause_error(cause: Cause, peer: PeerAddr) -> Error {
    match cause {
        Cause::Closed => Error::PeerClosed { peer },
        Cause::Failed(errno) => Error::PeerUnreachable { peer, errno },
        Cause::Protocol(what) => Error::Protocol(what),
        Cause::Stalled => Error::Stalled { peer },
        Cause::Rerouted => Error::PeerUnreachable {
            peer,
            errno: libc::ECONNREFUSED,
        },
    }
}

impl<T: Transport> EndpointProvider for Engine<T> {
    fn name(&self) -> Address {
        self.s.name
    }

    fn send(&mut self, cx: &mut Ctx<'_>, op: SendOp) -> std::result::Result<(), Rejected<SendOp>> {
        let name = match self.s.accepts(cx.av, op.peer) {
            Ok(name) => name,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        self.s.send(&mut self.t, cx, op, name);
        Ok(())
    }

    fn inject(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        tag: Option<u64>,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()> {
        self.inject_parts(cx, peer, tag, data, &[IoSlice::new(payload)])
    }

    fn inject_parts(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        tag: Option<u64>,
        data: Option<u64>,
        parts: &[IoSlice<'_>],
    ) -> Result<()> {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        let p = self.s.inject_peer(&mut self.t, cx, peer, len)?;
        let bytes = cost(len as u64);
        if !self.s.affords(p, bytes) {
            // No buffer of the caller's to wait in by rendezvous.
            self.s.stalled();
            return Err(Error::Again);
        }
        let hdr = Header::message(Kind::Eager, tag, data).encode();
        let n = wire::message_len(tag.is_some(), data.is_some());
        if self.s.write_parts_now(&mut self.t, p, bytes, &hdr[..n], parts) {
            return Ok(());
        }
        self.s.enqueue(p, bytes, Out::Owned(hdr, gather(parts)));
        self.s.posted(&mut self.t, cx, p);
        Ok(())
    }

    fn rma(&mut self, cx: &mut Ctx<'_>, op: RmaOp) -> std::result::Result<(), Rejected<RmaOp>> {
        let name = match self.s.accepts(cx.av, op.peer) {
            Ok(name) => name,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        self.s.rma(&mut self.t, cx, op, name);
        Ok(())
    }

    fn atomic(&mut self, cx: &mut Ctx<'_>, op: AtomicOp) -> std::result::Result<(), Rejected<AtomicOp>> {
        let name = match self.s.accepts(cx.av, op.peer) {
            Ok(name) => name,
            Err(e) => return Err(Rejected::new(e, op)),
        };
        self.s.atomic(&mut self.t, cx, op, name);
        Ok(())
    }

    fn inject_write(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        addr: u64,
        key: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()> {
        let p = self.s.inject_peer(&mut self.t, cx, peer, payload.len())?;
        let at = self.s.serial(p);
        if self.s.frames_wait(at) {
            // Held behind a device atomic, it would need a copy kept.
            return Err(Error::Again);
        }
        if !self.s.injected.contains(&at) {
            self.s.injected.push(at);
        }
        let mut h = Header::message(Kind::RmaWrite, None, data);
        h.flags |= wire::LAST;
        h.tag = key;
        h.addr = addr;
        h.len = payload.len() as u64;
        self.s.enqueue(p, 0, Out::Owned(h.encode(), payload.to_vec()));
        self.s.posted(&mut self.t, cx, p);
        Ok(())
    }

    fn recv(&mut self, cx: &mut Ctx<'_>, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>> {
        if self.s.closed {
            return Err(Rejected::new(Error::Canceled, op));
        }
        let peers = &self.s.peers;
        if let Some(hit) = self.s.rx.post(cx.av, op, |av, name| peers.reverse(av, name)) {
            self.s.deliver(&mut self.t, cx, hit.recv, hit.src, hit.tag, hit.msg);
        }
        Ok(())
    }

    fn peek(&mut self, cx: &mut Ctx<'_>, spec: RecvSpec, claim: bool) -> Result<Option<(Peeked, Option<Claim>)>> {
        let peers = &self.s.peers;
        Ok(self.s.rx.peek(cx.av, spec, claim, |av, name| peers.reverse(av, name)))
    }

    fn recv_claimed(
        &mut self,
        cx: &mut Ctx<'_>,
        claim: Claim,
        op: RecvOp,
    ) -> std::result::Result<(), Rejected<RecvOp>> {
        let (c, op) = self.s.rx.claimed(&claim, op)?;
        self.s.deliver(&mut self.t, cx, op, c.src, c.tag, c.msg);
        Ok(())
    }

    fn cancel(&mut self, cx: &mut Ctx<'_>, context: u64) -> Result<()> {
        self.s.rx.cancel(&mut cx.cq, context)
    }

    fn progress(&mut self, cx: &mut Ctx<'_>) {
        self.s.progress(&mut self.t, cx);
    }

    fn wait_fd(&self) -> RawFd {
        self.t.wait_fd()
    }

    fn prepare_wait(&mut self, cx: &mut Ctx<'_>) {
        self.s.keepalive.look_next();
        self.s.flush_all(&mut self.t, cx);
        if self.s.peers.connecting() {
            // A connect the transport could not start is retried by progress;
            // no peer signals it.
            self.t.wake();
            return;
        }
        if !self.t.prepare_wait() {
            self.s.progress(&mut self.t, cx);
            // That progress may have taken what made the descriptor readable
            // and left a transport unarmed (a pair's first armed, its second
            // with work): readable again, a caller that blocks now returns
            // at once and prepares anew instead of sleeping unarmed.
            self.t.wake();
        }
    }

    fn close(&mut self, cx: &mut Ctx<'_>) {
        self.s.close(&mut self.t, cx);
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.s.counted.report(self.s.rx.held(), &self.s.account);
        let st = self.s.stats;
        c.extend([
            ("rndv_pulls", st.pulls),
            ("rndv_pulls_failed", st.pulls_failed),
            ("rndv_pulls_outstanding", self.s.pulling.len() as u64),
            ("rndv_pushes", st.pushes),
            ("rndv_pushes_pulled", st.pushes_pulled),
            ("idle_yields", self.s.idle.yields),
            ("protocol_errors", st.protocol_errors),
            ("connects_crossed_over", st.crossed_over),
            ("sends_outstanding", self.s.sends.len() as u64),
            ("rma_outstanding", self.s.rmas.len() as u64),
            ("rma_native", st.rma_native),
            ("rma_native_failed", st.rma_native_failed),
            ("rma_served", st.rma_served),
            ("atomics_outstanding", self.s.atomics.len() as u64),
            ("atomics_refused_after_completion", st.atomics_refused_after_completion),
            ("atomics_device", st.atomics_device),
            ("atomics_device_failed", st.atomics_device_failed),
            ("peer_events_lost", self.s.events.lost()),
            ("connections", self.s.peers.connections() as u64),
            ("progress_probes", self.s.watch.probes),
            ("peers_stalled", self.s.watch.stalled),
            ("admission_refused", self.s.refusals),
        ]);
        if self.s.coalesce > 0 {
            c.push(("coalesced", st.coalesced));
        }
        c.extend(self.t.counters());
        c
    }

    fn peer_event(&mut self) -> Option<PeerEvent> {
        self.s.events.pop()
    }
}

/// Sink-free helpers the frame handler shares with the calls above.
impl State {
    fn progress<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        let motion = self.motion;
        self.refused = false;
        {
            let mut h = arrive::Handler { s: self, cx };
            t.progress(&mut h);
        }
        // Most calls find none of this work: one combined test on the
        // way, the work itself out of line.
        let rare = self.answers.len()
            | self.vetting.len()
            | self.pulls.len()
            | self.device_due.len()
            | self.held_back.len()
            | self.doomed.len()
            | self.failed.len()
            | self.concealed.len()
            | self.resumable
            | usize::from(self.peers.any_gated());
        if rare != 0 {
            self.rare_work(t, cx);
        }
        self.check_stalls(t, cx);
        self.keep_alive(t, cx);
        self.flush_all(t, cx);
        // Only a call that saw nothing move asks what it waits on: a call
        // that moved something restarts the clock either way.
        if self.motion == motion && self.waits_on_peer() {
            self.idle.waited();
        } else {
            self.idle.clear();
        }
    }

    /// Whether this side waits on a peer, which a yield lets run: for room
    /// it must make, for its answer to a send (a rendezvous it is to pull
    /// or clear, a delivery to acknowledge) or to an RMA or atomic its
    /// engine serves, or for the rest of a push only it can send (a push
    /// this side may pull has the stall rule instead, which a yield would
    /// keep from firing). An RMA or atomic a device moves waits on no
    /// process: the device completes it whoever runs.
    #[inline]
    fn waits_on_peer(&self) -> bool {
        self.refused
            || !self.sends.is_empty()
            || (self.resumable == 0 && !self.pushes.is_empty())
            || ((self.rmas.len() | self.atomics.len()) != 0 && self.awaits_target())
    }

    /// Whether an RMA or atomic waits for the target's engine to serve it.
    #[inline(never)]
    fn awaits_target(&self) -> bool {
        self.rmas.iter().any(|(_, r)| !r.native) || self.atomics.iter().any(|(_, a)| a.device.is_none())
    }

    /// What a progress call may leave behind besides frames to write:
    /// answers to connectors, handshakes to check, pulls and device steps to
    /// start, frames held back, connections to end, exposures to withdraw.
    #[inline(never)]
    fn rare_work<T: Transport>(&mut self, t: &mut T, cx: &mut Ctx<'_>) {
        if !self.answers.is_empty() {
            // Before connections end: a refused connector learns why.
            self.write_answers(t);
        }
        if self.peers.any_gated() || !self.vetting.is_empty() {
            self.check_handshakes(self.connect_timeout);
        }
        if !self.pulls.is_empty() {
            for pull in std::mem::take(&mut self.pulls) {
                self.pull(t, cx, pull);
            }
        }
        if self.resumable != 0 {
            self.pull_stalled(t, cx);
        }
        if !self.device_due.is_empty() {
            for token in std::mem::take(&mut self.device_due) {
                self.device_step(t, cx, token);
            }
        }
        if !self.held_back.is_empty() {
            self.release_held(t, cx);
        }
        self.end_doomed(t, cx);
        if !self.concealed.is_empty() {
            self.conceal_all(t);
        }
    }
}
