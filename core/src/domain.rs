//! The domain: the provider's shared resources and the one lock that
//! serialises every object opened from it.
//!
//! Threading model: all handles are `Send + Sync`; every call locks its
//! domain's mutex for its duration, which is uncontended when one thread
//! drives a domain (the intended use, like a UCX worker). Threads that want
//! parallelism open one domain each. Progress is manual: polling or waiting
//! on a completion queue moves the data of the endpoints bound to it.

use std::collections::VecDeque;
use std::sync::Arc;

use slab::Slab;

use crate::addr::{AvTable, PeerAddr};
use crate::attr::{CqAttr, EndpointAttr};
use crate::av::AddressVector;
use crate::completion::{Completion, Flags};
use crate::cq::CompletionQueue;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::lock::{DomainLock, Guard, Threading};
use crate::mr::{Access, MemoryRegion};
use crate::provider::{Ctx, DomainProvider, EndpointProvider, Rejected};
use crate::sink::Sink;

/// A domain: opens completion queues, address vectors and endpoints that
/// share one provider instance.
#[derive(Clone)]
pub struct Domain {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    state: DomainLock<State>,
    provider: &'static str,
    /// The provider's id byte in packed remote keys.
    pub(crate) provider_id: u8,
    /// Its endpoints apply remote atomics.
    atomics: bool,
    /// Who does them, and its device's atomic capability.
    atomic_caps: crate::AtomicCaps,
}

pub(crate) struct State {
    pub(crate) prov: Box<dyn DomainProvider>,
    pub(crate) eps: Slab<EpSlot>,
    pub(crate) cqs: Slab<VecDeque<Completion>>,
    pub(crate) avs: Slab<AvTable>,
    /// For each completion queue, the endpoints bound to it.
    pub(crate) bound: Slab<Vec<usize>>,
}

pub(crate) struct EpSlot {
    pub(crate) prov: Box<dyn EndpointProvider>,
    pub(crate) cq: usize,
    pub(crate) av: usize,
    /// Operations posted that will report a completion and have not yet
    /// (kept only while `counting`).
    pub(crate) outstanding: usize,
    /// `EndpointAttr::max_outstanding` (0: unbounded).
    pub(crate) limit: usize,
    /// `EndpointAttr::max_outstanding_per_peer` (0: unbounded).
    pub(crate) peer_limit: usize,
    /// Sends and RMA that will report a completion, per peer handle
    /// (kept only with a `peer_limit`).
    pub(crate) per_peer: Vec<u32>,
    /// Either bound is set: posts and completions are counted. Without one
    /// the data path counts nothing.
    pub(crate) counting: bool,
    /// `EndpointAttr::selective_completion`.
    pub(crate) selective: bool,
}

impl Shared {
    /// The domain's state, locked (or, in `Threading::Single` mode, checked
    /// to be the owning thread's). Inlined: out of line, every poll paid a
    /// call and the guard's return through memory.
    #[inline]
    pub(crate) fn lock(&self) -> Result<Guard<'_, State>> {
        self.state.lock()
    }
}

impl State {
    /// Runs `f` on endpoint `ep` with its completion ring and address vector.
    /// Always inlined: a posting call's operation and its refusal are large
    /// values, copied once more at every call boundary they cross.
    #[inline(always)]
    pub(crate) fn with_ep<R>(&mut self, ep: usize, f: impl FnOnce(&mut dyn EndpointProvider, &mut Ctx<'_>) -> R) -> R {
        let slot = &mut self.eps[ep];
        let mut filled = 0;
        let mut cx = Ctx {
            cq: Sink::new(&mut [], &mut filled, &mut self.cqs[slot.cq]),
            av: &self.avs[slot.av],
            domain: self.prov.as_ref(),
        };
        slot.run(&mut cx, f)
    }

    /// [`with_ep`](Self::with_ep) for a posting call; `counted`: the
    /// endpoint counts (it has a bound) and the operation will report a
    /// completion, so it counts as outstanding (from before the call, as
    /// it may complete inside it; to `peer` too for a send or RMA) unless
    /// refused. Inlined as `with_ep` is.
    #[inline(always)]
    pub(crate) fn post<T>(
        &mut self,
        ep: usize,
        counted: bool,
        peer: Option<PeerAddr>,
        f: impl FnOnce(&mut dyn EndpointProvider, &mut Ctx<'_>) -> std::result::Result<(), Rejected<T>>,
    ) -> std::result::Result<(), Rejected<T>> {
        if !counted {
            return self.with_ep(ep, f); // unbounded: nothing is counted
        }
        let peer = peer.and_then(|p| self.eps[ep].peer_slot(p));
        self.eps[ep].count(peer, true);
        let r = self.with_ep(ep, f);
        if r.is_err() {
            self.eps[ep].count(peer, false);
        }
        r
    }

    /// [`Error::Again`] when endpoint `ep` has `max_outstanding` operations
    /// in flight, or (`peer`: a send or RMA) `max_outstanding_per_peer` to
    /// that peer.
    pub(crate) fn admit(&self, ep: usize, peer: Option<PeerAddr>) -> Result<()> {
        let slot = &self.eps[ep];
        if slot.limit != 0 && slot.outstanding >= slot.limit {
            return Err(Error::Again);
        }
        if let (true, Some(p)) = (slot.peer_limit != 0, peer) {
            let n = slot.per_peer.get(p.0 as usize).copied().unwrap_or(0);
            if n as usize >= slot.peer_limit {
                return Err(Error::Again);
            }
        }
        Ok(())
    }

    /// Progresses every endpoint bound to completion queue `cq`; what they
    /// complete fills `out` from slot `*filled` (then the queue's ring, which
    /// must be empty unless `out` is full). Inlined into
    /// `CompletionQueue::poll`, which calls it on every poll.
    #[inline(always)]
    pub(crate) fn progress_cq(&mut self, cq: usize, out: &mut [Completion], filled: &mut usize) {
        self.each_bound(cq, out, filled, |ep, cx| ep.progress(cx));
    }

    /// Moves what endpoint `ep`'s completion queue holds into `out`, then
    /// progresses `ep` alone, what it completes filling the rest of `out`
    /// (then the queue's ring); returns how many `out` got. Inlined into
    /// `Endpoint::poll_alone`, as `progress_cq` is into `CompletionQueue::poll`.
    #[inline(always)]
    pub(crate) fn poll_ep(&mut self, ep: usize, out: &mut [Completion]) -> usize {
        let slot = &mut self.eps[ep];
        let ring = &mut self.cqs[slot.cq];
        let mut filled = crate::cq::take_queued(ring, out);
        let mut cx = Ctx {
            cq: Sink::new(out, &mut filled, ring),
            av: &self.avs[slot.av],
            domain: self.prov.as_ref(),
        };
        slot.run(&mut cx, |ep, cx| ep.progress(cx));
        filled
    }

    /// Lets every endpoint bound to `cq` arm its events before a blocking
    /// wait; true when no completion is ready (safe to block).
    pub(crate) fn ready_to_block(&mut self, cq: usize) -> bool {
        self.each_bound(cq, &mut [], &mut 0, |ep, cx| ep.prepare_wait(cx));
        self.cqs[cq].is_empty()
    }

    #[inline(always)]
    fn each_bound(
        &mut self,
        cq: usize,
        out: &mut [Completion],
        filled: &mut usize,
        mut f: impl FnMut(&mut dyn EndpointProvider, &mut Ctx<'_>),
    ) {
        let mut sink = Sink::new(out, filled, &mut self.cqs[cq]);
        for &ep in &self.bound[cq] {
            let slot = &mut self.eps[ep];
            let mut cx = Ctx {
                cq: sink.reborrow(),
                av: &self.avs[slot.av],
                domain: self.prov.as_ref(),
            };
            slot.run(&mut cx, &mut f);
        }
    }
}

/// Peer handles beyond this many are not counted per peer (an address
/// vector this large is not a use the bound is for; the provider refuses a
/// handle it does not know anyway).
const PEER_SLOTS_MAX: u64 = 1 << 20;

impl EpSlot {
    /// Runs `f` on this endpoint's provider with `cx`; an endpoint that
    /// counts takes what the call completed off its counts. Inlined: the
    /// provider's answer (a refusal is a large value) is the caller's,
    /// written in place.
    #[inline(always)]
    fn run<R>(&mut self, cx: &mut Ctx<'_>, f: impl FnOnce(&mut dyn EndpointProvider, &mut Ctx<'_>) -> R) -> R {
        if !self.counting {
            return f(self.prov.as_mut(), cx);
        }
        let before = cx.cq.mark();
        let r = f(self.prov.as_mut(), cx);
        self.settle(cx.cq.since(before));
        r
    }

    /// The per-peer counter index of `peer`, when per-peer bounds are kept.
    fn peer_slot(&mut self, peer: PeerAddr) -> Option<usize> {
        if self.peer_limit == 0 || peer.0 >= PEER_SLOTS_MAX {
            return None;
        }
        let i = peer.0 as usize;
        if i >= self.per_peer.len() {
            self.per_peer.resize(i + 1, 0);
        }
        Some(i)
    }

    /// One operation more (`up`) or less in flight, on the endpoint and on
    /// peer counter `peer`.
    fn count(&mut self, peer: Option<usize>, up: bool) {
        if up {
            self.outstanding += 1;
        } else {
            self.outstanding = self.outstanding.saturating_sub(1);
        }
        if let Some(n) = peer.and_then(|i| self.per_peer.get_mut(i)) {
            *n = if up { n.saturating_add(1) } else { n.saturating_sub(1) };
        }
    }

    /// Takes the completions added to `ring` since it held `before` off the
    /// counts: each of the endpoint's own operations (not a peer's remote
    /// write) off `outstanding`, and a send's or RMA's off its peer's (the
    /// completion's `src` names the peer).
    fn settle<'c>(&mut self, produced: impl Iterator<Item = &'c Completion>) {
        for c in produced {
            if c.flags.contains(Flags::REMOTE_WRITE) {
                continue;
            }
            let peer = (!c.flags.contains(Flags::RECV) && self.peer_limit != 0 && c.src.0 < PEER_SLOTS_MAX)
                .then_some(c.src.0 as usize);
            self.count(peer, false);
        }
    }
}

impl Domain {
    /// A domain over an opened provider (the `xfer` facade chooses one).
    /// Takes a provider of the unstable interface, so it is not part of the
    /// stable API either.
    #[doc(hidden)]
    pub fn new(prov: Box<dyn DomainProvider>) -> Domain {
        // SAFETY: not `Serialized`.
        unsafe { Domain::with_threading_unchecked(prov, Threading::Safe) }
    }

    /// [`new`](Self::new) in threading mode `threading`: a `Single`
    /// domain belongs to the calling thread; `Serialized` is refused
    /// ([`Error::InvalidArgument`]): it needs the caller's promise
    /// ([`with_threading_unchecked`](Self::with_threading_unchecked)).
    #[doc(hidden)]
    pub fn with_threading(prov: Box<dyn DomainProvider>, threading: Threading) -> Result<Domain> {
        threading.safe_to_open()?;
        // SAFETY: not `Serialized` (checked above).
        Ok(unsafe { Domain::with_threading_unchecked(prov, threading) })
    }

    /// [`with_threading`](Self::with_threading), `Serialized` too.
    ///
    /// # Safety
    /// With [`Threading::Serialized`], no two calls into the domain or
    /// anything opened from it (endpoints, queues, regions, their drops)
    /// may overlap, from whatever threads they come: nothing else keeps
    /// them apart.
    #[doc(hidden)]
    pub unsafe fn with_threading_unchecked(prov: Box<dyn DomainProvider>, threading: Threading) -> Domain {
        let provider = prov.name();
        let provider_id = prov.provider_id();
        let atomics = prov.atomics();
        let atomic_caps = prov.atomic_caps();
        let state = State {
            prov,
            eps: Slab::new(),
            cqs: Slab::new(),
            avs: Slab::new(),
            bound: Slab::new(),
        };
        Domain {
            shared: Arc::new(Shared {
                state: DomainLock::new(state, threading),
                provider,
                provider_id,
                atomics,
                atomic_caps,
            }),
        }
    }

    /// Which threads may call into it ([`DomainAttr::threading`](crate::DomainAttr::threading)).
    pub fn threading(&self) -> Threading {
        self.shared.state.mode()
    }

    /// The provider's name.
    pub fn provider(&self) -> &'static str {
        self.shared.provider
    }

    /// Whether its endpoints apply remote atomics
    /// ([`Endpoint::post_atomic`](crate::Endpoint::post_atomic)); those of
    /// a domain without refuse them with [`Error::NotSupported`].
    pub fn atomics(&self) -> bool {
        self.shared.atomics
    }

    /// Who does remote atomics on its regions (the target's CPU, or the
    /// initiators' devices: `XFER_ATOMIC_MODE` resolved) and its verbs
    /// device's atomic capability (`atomic_cap`), if it has a device.
    pub fn atomic_caps(&self) -> crate::AtomicCaps {
        self.shared.atomic_caps
    }

    /// Opens a completion queue.
    pub fn cq(&self, attr: &CqAttr) -> Result<CompletionQueue> {
        CompletionQueue::open(self.shared.clone(), attr)
    }

    /// Opens an address vector.
    pub fn av(&self) -> Result<AddressVector> {
        AddressVector::open(self.shared.clone())
    }

    /// Opens an endpoint whose completions go to `cq` and whose peers are
    /// named in `av`; both must come from this domain.
    pub fn endpoint(&self, cq: &CompletionQueue, av: &AddressVector, attr: &EndpointAttr) -> Result<Endpoint> {
        if !Arc::ptr_eq(cq.shared(), &self.shared) || !Arc::ptr_eq(av.shared(), &self.shared) {
            return Err(Error::InvalidArgument(
                "completion queue and address vector must belong to this domain",
            ));
        }
        let mut st = self.shared.lock()?;
        let prov = st.prov.open_endpoint(attr)?;
        let (name, fd) = (prov.name(), prov.wait_fd());
        cq.watch(fd)?;
        let key = st.eps.insert(EpSlot {
            prov,
            cq: cq.key(),
            av: av.key(),
            outstanding: 0,
            limit: attr.max_outstanding,
            peer_limit: attr.max_outstanding_per_peer,
            per_peer: Vec::new(),
            counting: attr.max_outstanding != 0 || attr.max_outstanding_per_peer != 0,
            selective: attr.selective_completion,
        });
        st.bound[cq.key()].push(key);
        drop(st);
        Ok(Endpoint::new(
            self.shared.clone(),
            key,
            cq.clone(),
            av.clone(),
            name,
            fd,
        ))
    }
}

impl Domain {
    /// Registers `buf` for RMA with `access` and keeps it while registered;
    /// [`MemoryRegion::into_inner`] gives it back. A refused registration
    /// hands the buffer back in [`Rejected`].
    pub fn register(&self, buf: Vec<u8>, access: Access) -> std::result::Result<MemoryRegion, Rejected<Vec<u8>>> {
        let len = buf.len();
        let ptr = Box::into_raw(buf.into_boxed_slice()) as *mut u8;
        // SAFETY: the Box's memory is valid for `len` bytes and, being
        // leaked, stays valid until the region frees it (`owned` = true).
        match unsafe { MemoryRegion::new(self.shared.clone(), ptr, len, access, true) } {
            Ok(mr) => Ok(mr),
            Err(e) => {
                let slice = std::ptr::slice_from_raw_parts_mut(ptr, len);
                // SAFETY: registration failed, so nothing else refers to the
                // leaked Box; rebuilding it once returns the memory.
                let back = unsafe { Box::from_raw(slice) }.into_vec();
                Err(Rejected::new(e, back))
            }
        }
    }

    /// Registers `len` bytes at `ptr` with `access` (`fi_mr_reg`).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes until the
    /// returned region is dropped. While it is registered, peers may read or
    /// write it (as `access` allows) whenever this domain makes progress:
    /// the caller must not hold Rust references to the memory across calls
    /// into this domain, and must synchronise its own accesses with them
    /// (or use [`MemoryRegion::read_at`] / [`MemoryRegion::write_at`]).
    /// `ptr` may dangle when `len` is 0.
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize, access: Access) -> Result<MemoryRegion> {
        // SAFETY: forwarded from this function's contract.
        unsafe { MemoryRegion::new(self.shared.clone(), ptr, len, access, false) }
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("provider", &self.shared.provider)
            .finish()
    }
}
