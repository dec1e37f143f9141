//! The traits a provider implements, and the operation descriptors it receives.
//!
//! A provider is thin: it moves bytes and drives its protocol. Core owns the
//! objects users see (completion queues, address vectors), the lock that
//! serialises a domain, and the tag matcher ([`crate::tag::Matcher`]) that
//! providers embed. Every call happens with the domain's lock held, so
//! providers need no locking of their own.

use std::os::fd::RawFd;

use crate::addr::{Address, AvTable, PeerAddr};
use crate::atomic::AtomicOp;
use crate::attr::EndpointAttr;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::mr::keys::KeyTable;
use crate::mr::Access;
#[cfg(doc)]
use crate::mr::RemoteKey;
use crate::peek::{Claim, Peeked};
use crate::sink::Sink;
use crate::tag::RecvSpec;

/// A send (message or tagged) handed to a provider.
#[derive(Debug)]
pub struct SendOp {
    /// Destination.
    pub peer: PeerAddr,
    /// `Some(tag)` for a tagged send, `None` for a message send.
    pub tag: Option<u64>,
    /// Immediate data delivered with the receive's completion.
    pub data: Option<u64>,
    /// The payload.
    pub buf: Buffer,
    /// Returned in the completion.
    pub context: u64,
    /// Report success with a completion (errors are always reported).
    pub completion: bool,
    /// When a successful send completes ([`CompletionLevel::Inject`]
    /// unless asked otherwise).
    pub level: CompletionLevel,
}

/// When a send's successful completion is reported: libfabric's
/// `FI_INJECT_COMPLETE`, `FI_TRANSMIT_COMPLETE` and `FI_DELIVERY_COMPLETE`
/// (fi_cq(3)). Each level implies the ones before it; a provider may
/// complete a send later than asked, never earlier.
///
/// ```
/// use xfer_core::{CompletionLevel, SendOp};
/// # fn f(peer: xfer_core::PeerAddr) -> SendOp {
/// SendOp {
///     peer,
///     tag: None,
///     data: None,
///     buf: b"committed".to_vec().into(),
///     context: 7,
///     completion: true,
///     // Complete only once the target has the message.
///     level: CompletionLevel::Delivery,
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CompletionLevel {
    /// The send's buffer may be reused: the payload was handed to the
    /// transport (eager) or pulled by the receiver (rendezvous). Nothing is
    /// known about its arrival: a peer that dies next loses an eager
    /// message without an error. The cheapest level, and the default.
    #[default]
    Inject,
    /// The message reached the target. xfer gives this level with
    /// [`Delivery`](Self::Delivery)'s guarantee: the same acknowledgement
    /// from the target is what tells a sender either.
    Transmit,
    /// The target has the message: it is in the receive that matched it
    /// or, with none posted, held by the target's provider until one is
    /// (fi_cq(3): a buffered message is delivered). A rendezvous-sized
    /// message, which only a matched receive takes, completes once that
    /// receive has every byte. Either way a receive that was posted
    /// already holds the data when the send completes. Costs an
    /// acknowledgement from the target, so a completion comes a round trip
    /// later than an eager inject-complete one.
    Delivery,
}

/// A receive (message or tagged) handed to a provider.
#[derive(Debug)]
pub struct RecvOp {
    /// Which messages it accepts (source, tag, ignore mask).
    pub spec: RecvSpec,
    /// Whether it receives tagged messages (else untagged ones).
    pub tagged: bool,
    /// Where the message lands.
    pub buf: Buffer,
    /// Returned in the completion.
    pub context: u64,
}

/// Which way an RMA operation moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmaKind {
    /// Local buffer to remote memory (`fi_write`).
    Write,
    /// Remote memory into the local buffer (`fi_read`).
    Read,
}

/// An RMA operation handed to a provider: `buf.len()` bytes between the local
/// buffer and the target's memory at `addr` in the region named by `key`
/// (`fi_write`/`fi_read`'s `addr` and `key`).
///
/// [`Endpoint::write`](crate::Endpoint::write) and friends fill `addr` and
/// `key` from a [`RemoteKey`] and an offset into its region.
#[derive(Debug)]
pub struct RmaOp {
    /// The target.
    pub peer: PeerAddr,
    /// Write or read.
    pub kind: RmaKind,
    /// Local memory: the source of a write, the destination of a read.
    pub buf: Buffer,
    /// Target address of the first byte ([`RemoteKey::addr`] plus an offset).
    pub addr: u64,
    /// The target region's remote key ([`RemoteKey::key`]).
    pub key: u64,
    /// Immediate data for the target's completion (writes only).
    pub data: Option<u64>,
    /// Returned in the completion.
    pub context: u64,
    /// Report success with a completion (errors are always reported).
    pub completion: bool,
}

/// The keys a provider gives a new registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// The local descriptor (verbs: the lkey; TCP: the key-table key).
    pub desc: u64,
    /// The remote key peers name the region with.
    pub key: u64,
}

/// An operation the provider refused, handed back with its buffer so no data
/// is lost.
///
/// It is an error type of its own (`Display` shows the reason, `source()`
/// is the reason's), so `?` works in functions returning `xfer::Result`
/// or `std::io::Result` (the buffer is dropped) and `Box<dyn Error>` or
/// `anyhow::Result` (the buffer travels with the error); the facade's
/// crate documentation shows each.
#[derive(Debug)]
pub struct Rejected<T> {
    /// Why it was refused.
    pub error: Error,
    /// The operation, unchanged.
    pub op: T,
}

impl<T> Rejected<T> {
    /// Pairs an error with the refused operation.
    pub fn new(error: Error, op: T) -> Self {
        Rejected { error, op }
    }

    /// The operation back, dropping the error.
    pub fn into_op(self) -> T {
        self.op
    }
}

impl<T> std::fmt::Display for Rejected<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

/// Transparent over its [`Error`]: the same text, the same source, so an
/// error report does not say the reason twice.
impl<T: std::fmt::Debug> std::error::Error for Rejected<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// The refusal as an I/O error (as `From<Error>`); the operation's buffer is
/// dropped.
impl<T> From<Rejected<T>> for std::io::Error {
    fn from(r: Rejected<T>) -> std::io::Error {
        r.error.into()
    }
}

/// What a provider may touch during a call: where the completions it
/// produces go, and the endpoint's address vector.
pub struct Ctx<'a> {
    /// Completions produced by this call: the polling caller's array, then
    /// the endpoint's completion queue.
    pub cq: Sink<'a>,
    /// The endpoint's address vector.
    pub av: &'a AvTable,
    /// The endpoint's domain, for software providers that serve remote
    /// memory accesses themselves ([`DomainProvider::remote_target`]).
    pub domain: &'a dyn DomainProvider,
}

/// One provider's domain: opens endpoints and validates names.
pub trait DomainProvider: Send {
    /// The provider's name (`tcp`, `verbs`).
    fn name(&self) -> &'static str;
    /// Checks that `bytes` are an endpoint name of this provider.
    fn check_address(&self, bytes: &[u8]) -> Result<Address>;
    /// Opens an endpoint.
    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>>;
    /// The provider's id byte in packed remote keys (the same value as the
    /// first byte of its endpoint names: `0x01` for TCP).
    fn provider_id(&self) -> u8;
    /// Whether its endpoints apply remote atomics
    /// ([`EndpointProvider::atomic`]); false (the default) for a provider
    /// whose endpoints refuse them with [`Error::NotSupported`].
    fn atomics(&self) -> bool {
        false
    }
    /// Who does remote atomics on its regions, and its device's atomic
    /// capability; the default: the target's CPU, no device.
    fn atomic_caps(&self) -> crate::AtomicCaps {
        crate::AtomicCaps::CPU
    }
    /// The registrations of a provider that serves RMA in software (TCP,
    /// shm): with one, [`register`](Self::register),
    /// [`deregister`](Self::deregister) and
    /// [`remote_target`](Self::remote_target) are this table's. `None`
    /// (the default): the provider has its own, or none.
    fn key_table(&self) -> Option<&KeyTable> {
        None
    }
    /// [`key_table`](Self::key_table), to change.
    fn key_table_mut(&mut self) -> Option<&mut KeyTable> {
        None
    }
    /// Registers `[addr, addr + len)` with `access` (`ibv_reg_mr`; for a
    /// software provider a key-table entry). The caller guarantees the
    /// memory stays valid until [`deregister`](Self::deregister).
    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<MrKeys> {
        match self.key_table_mut() {
            Some(keys) => keys.insert(addr, len, access),
            None => Err(Error::NotSupported("memory registration")),
        }
    }
    /// Ends the registration with this remote key; later accesses by peers
    /// fail. Must not fail (log instead).
    fn deregister(&mut self, key: u64) {
        if let Some(keys) = self.key_table_mut() {
            keys.remove(key);
        }
    }
    /// For providers that serve RMA in software: checks that `key` names a
    /// live registration granting `access` over `[addr, addr + len)` and
    /// returns a pointer to `addr`. The pointer is valid for `len` bytes
    /// while the domain lock is held (a registration is only removed under
    /// it). The error is [`Error::RemoteAccess`] with the failed check.
    fn remote_target(&self, key: u64, addr: u64, len: u64, access: Access) -> Result<*mut u8> {
        match self.key_table() {
            Some(keys) => keys.target(key, addr, len, access),
            None => Err(Error::NotSupported("software RMA target")),
        }
    }
    /// The region (start address, length) a peer's device reaches under
    /// `key` for `access` by itself, without this side's CPU (verbs: an MR
    /// registered with that remote access), or `None`, the default: peers'
    /// RMA on it is served in software. The RDM engine tells an initiator
    /// whose RMA it served, so its next ones on the key may go natively.
    fn native_rma(&self, key: u64, access: Access) -> Option<(u64, u64)> {
        let _ = (key, access);
        None
    }
    /// A word every grant of [`native_rma`](Self::native_rma) carries to
    /// the initiator and its transport gets back with each native
    /// operation (`Remote::stamp`). 0, the default, for a device that
    /// refuses a deregistered key by itself (verbs). Shared memory's is the
    /// revocation epoch its deregistrations advance, which the initiator
    /// compares with the target's current one before each copy.
    fn grant_stamp(&self) -> u64 {
        0
    }

    /// The region (start address, length) whose atomics peers' devices do
    /// under `key` (verbs: a region registered with remote read and write,
    /// its ibv MR with remote atomic access, on a domain whose atomic mode
    /// is `device`), or `None`, the default: this side's CPU applies them.
    /// The RDM engine grants it to an initiator that asks before its first
    /// atomic there, and applies none itself on an element of it.
    fn native_atomic(&self, key: u64) -> Option<(u64, u64)> {
        let _ = key;
        None
    }
    /// Whether this domain's endpoints ask targets to grant atomics to
    /// their device (the atomic mode is `device`); `false`, the default:
    /// they send every atomic in frames.
    fn device_atomics(&self) -> bool {
        false
    }
}

/// One provider's endpoint: reliable, connectionless to the user (RDM).
pub trait EndpointProvider: Send {
    /// The endpoint's name, to be inserted into peers' address vectors.
    fn name(&self) -> Address;
    /// Starts a send. Completions it causes go to `cx.cq`.
    fn send(&mut self, cx: &mut Ctx<'_>, op: SendOp) -> std::result::Result<(), Rejected<SendOp>>;
    /// Copies `payload` and sends it with no completion (`fi_inject`).
    fn inject(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        tag: Option<u64>,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()>;
    /// [`inject`](Self::inject) of a payload given as `parts`, one after
    /// another: a provider that can writes them as they are, with no copy
    /// into one buffer first. The default gathers them and injects that.
    fn inject_parts(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        tag: Option<u64>,
        data: Option<u64>,
        parts: &[std::io::IoSlice<'_>],
    ) -> Result<()> {
        self.inject(cx, peer, tag, data, &crate::rdm::transport::gather(parts))
    }
    /// Starts an RMA write or read. Its completion (flags `RMA|WRITE` or
    /// `RMA|READ`) goes to `cx.cq` once the target has applied the write or
    /// the read data has arrived.
    fn rma(&mut self, cx: &mut Ctx<'_>, op: RmaOp) -> std::result::Result<(), Rejected<RmaOp>> {
        let _ = cx;
        Err(Rejected::new(Error::NotSupported("RMA"), op))
    }
    /// Starts a remote atomic. Its completion (flags `ATOMIC|READ` with the
    /// old value in `data` when it fetches, else `ATOMIC|WRITE`) goes to
    /// `cx.cq` once the target applied it.
    fn atomic(&mut self, cx: &mut Ctx<'_>, op: AtomicOp) -> std::result::Result<(), Rejected<AtomicOp>> {
        let _ = cx;
        Err(Rejected::new(
            Error::NotSupported("remote atomics on this provider"),
            op,
        ))
    }
    /// Copies `payload` and writes it to `addr` in the region `key` with no
    /// completion, even on failure (`fi_inject_write`).
    fn inject_write(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        addr: u64,
        key: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()> {
        let _ = (cx, peer, addr, key, data, payload);
        Err(Error::NotSupported("RMA"))
    }
    /// Posts a receive.
    fn recv(&mut self, cx: &mut Ctx<'_>, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>>;
    /// Looks for the earliest unexpected tagged message `spec` matches
    /// (`FI_PEEK`), after giving messages from then-unknown senders the
    /// handles the address vector now has for them. With `claim` the message
    /// is taken out of matching (`FI_PEEK | FI_CLAIM`) and the claim returned
    /// for [`recv_claimed`](Self::recv_claimed). Never waits.
    fn peek(&mut self, cx: &mut Ctx<'_>, spec: RecvSpec, claim: bool) -> Result<Option<(Peeked, Option<Claim>)>> {
        let _ = (cx, spec, claim);
        Err(Error::NotSupported("peek"))
    }
    /// Receives the message `claim` names into `op`'s buffer, as a posted
    /// receive that matched it would (`FI_CLAIM`); `op.spec` is not used.
    /// [`Error::NotFound`] when this endpoint holds no such claim.
    fn recv_claimed(
        &mut self,
        cx: &mut Ctx<'_>,
        claim: Claim,
        op: RecvOp,
    ) -> std::result::Result<(), Rejected<RecvOp>> {
        let _ = (cx, claim);
        Err(Rejected::new(Error::NotSupported("peek"), op))
    }
    /// Cancels the posted receive with this context; its completion reports
    /// [`Error::Canceled`]. Fails with [`Error::NotFound`] when no such
    /// receive is waiting.
    fn cancel(&mut self, cx: &mut Ctx<'_>, context: u64) -> Result<()>;
    /// Moves data and produces completions; never blocks.
    fn progress(&mut self, cx: &mut Ctx<'_>);
    /// A descriptor that becomes readable when `progress` has work to do
    /// (once [`prepare_wait`](Self::prepare_wait) has been called).
    fn wait_fd(&self) -> RawFd;
    /// Called before the program blocks on [`wait_fd`](Self::wait_fd): a
    /// provider whose events must be armed (a verbs CQ's notification) arms
    /// them here, and may move data (completions go to `cx.cq`, which the
    /// caller checks before blocking). `trywait` calls it without a
    /// [`progress`](Self::progress) first, so anything that would leave the
    /// peer or the descriptor waiting on us (held-back frames, receive
    /// buffers to repost, a connection outside the epoll set) is settled
    /// here. Busy-polling programs never get here, so they pay nothing for
    /// events (`fi_trywait`).
    fn prepare_wait(&mut self, cx: &mut Ctx<'_>) {
        let _ = cx;
    }
    /// Ends every outstanding operation with a cancelled completion and
    /// releases the endpoint's resources; called once, before drop.
    fn close(&mut self, cx: &mut Ctx<'_>);
    /// The provider's counters (name, value), for tests and diagnostics.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The oldest peer event its progress produced, when events are on
    /// (`EndpointAttr::peer_events`; [`crate::event::PeerEvents`] keeps them).
    fn peer_event(&mut self) -> Option<crate::event::PeerEvent> {
        None
    }
}
