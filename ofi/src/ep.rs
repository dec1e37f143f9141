//! The endpoint (`fi_endpoint`, `FI_EP_RDM`): bound to an AV and one or two
//! CQs, then `fi_enable` opens the xfer [`Endpoint`] (with its own xfer
//! completion queue) that every data call maps onto. [`opt`]: xfer's own
//! endpoint options.

pub(crate) mod opt;

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

use xfer_core::unstable::hash::FastMap;
use xfer_facade::{
    Address, Buffer, Claim, Completion, CompletionLevel, CompletionQueue, CqAttr, Endpoint, EndpointAttr, Error, Flags,
    JobKey, Peeked, PeerAddr, RecvOp, RecvSpec, SendOp,
};

use crate::av::{self, AvCore};
use crate::cntr::{self, CntrCore};
use crate::cq::{self, CqCore, Entry, Out};
use crate::domain::{self, DomainCore};
use crate::entry::{self, enosys, guard, lock, scode, Core, Obj, PANIC};
use crate::fetch::{Fetches, FETCH};
use crate::fi;
use crate::info::{CAPS, IMPLIED_CAPS, MAX_MSG_SIZE, PRIMARY_CAPS};
use crate::iov::{Scatters, SCATTER};
use crate::join::{Joins, JOIN};
use crate::latch::Latch;
use crate::multi::{Multis, MULTI};

/// The bit an operation's xfer context carries when the application asked
/// for no completion (`FI_SELECTIVE_COMPLETION` without `FI_COMPLETION`) but
/// xfer must still report it: every receive, and sends and RMA a counter
/// counts. The router counts such a completion, reports it with the
/// application's context if it failed (libfabric reports errors always),
/// and drops it otherwise (decision 55). On selective endpoints a context
/// with this bit set is refused (`-FI_EINVAL`): no user-space pointer has it.
pub(crate) const SILENT: u64 = 1 << 63;

/// The capabilities of an endpoint opened from an fi_info that names none:
/// messages and tagged messages both ways, no directed receives.
const DEFAULT_CAPS: u64 = PRIMARY_CAPS | fi::FI_SEND | fi::FI_RECV | IMPLIED_CAPS;

/// Completions taken from the xfer CQ per poll.
const POLL_BATCH: usize = 16;

/// Polls an enabled endpoint's xfer completions into `scratch`: how many it
/// got (none when the poll failed, which is logged).
#[inline(always)]
fn poll(en: &Enabled, scratch: &mut [Completion]) -> usize {
    match en.ep.poll_alone(scratch) {
        Ok(n) => n,
        Err(e) => poll_failed(&e),
    }
}

/// [`poll`] once a poll filled the scratch. Out of line: inlined, its
/// domain lock's thread check (a `__tls_get_addr` call in this shared
/// library) was hoisted ahead of the routing of every hit.
#[inline(never)]
fn poll_again(en: &Enabled, scratch: &mut [Completion]) -> usize {
    poll(en, scratch)
}

#[cold]
fn poll_failed(e: &Error) -> usize {
    xfer_core::error_limited!(error = %e, "polling the xfer completion queue");
    0
}

/// What was bound before `fi_enable`.
#[derive(Default)]
struct Bound {
    av: Option<Arc<AvCore>>,
    tx: Option<Arc<CqCore>>,
    rx: Option<Arc<CqCore>>,
    tx_selective: bool,
    rx_selective: bool,
    counters: Counters,
}

/// The counters bound to an endpoint, by the operations they count.
#[derive(Default, Clone)]
pub(crate) struct Counters {
    pub(crate) send: Option<Arc<CntrCore>>,
    recv: Option<Arc<CntrCore>>,
    pub(crate) write: Option<Arc<CntrCore>>,
    pub(crate) read: Option<Arc<CntrCore>>,
    /// RMA peers applied to this endpoint (`FI_REMOTE_WRITE`,
    /// `FI_REMOTE_READ`; endpoints with `FI_RMA_EVENT` only).
    remote_write: Option<Arc<CntrCore>>,
    remote_read: Option<Arc<CntrCore>>,
}

impl Counters {
    /// The counter a completion with these flags counts on.
    fn for_completion(&self, flags: Flags) -> Option<&Arc<CntrCore>> {
        if flags.contains(Flags::REMOTE_WRITE) {
            self.remote_write.as_ref()
        } else if flags.contains(Flags::REMOTE_READ) {
            self.remote_read.as_ref()
        } else if flags.contains(Flags::RECV) {
            self.recv.as_ref()
        } else if flags.contains(Flags::RMA) || flags.contains(Flags::ATOMIC) {
            // fi_cntr(3): atomics count as writes, fetching ones as reads.
            match flags.contains(Flags::READ) {
                true => self.read.as_ref(),
                false => self.write.as_ref(),
            }
        } else {
            self.send.as_ref()
        }
    }

    /// Every counter bound (one may appear more than once).
    fn all(&self) -> impl Iterator<Item = &Arc<CntrCore>> {
        [
            &self.send,
            &self.recv,
            &self.write,
            &self.read,
            &self.remote_write,
            &self.remote_read,
        ]
        .into_iter()
        .flatten()
    }
}

/// An enabled endpoint: the xfer objects and where its completions go.
pub(crate) struct Enabled {
    pub(crate) ep: Endpoint,
    pub(crate) cq: CompletionQueue,
    /// Receives into several buffers, staged (dropped after `ep`: xfer
    /// writes into their staging buffers until then).
    pub(crate) scatters: Scatters,
    /// Multi-receive buffers posted.
    multis: Multis,
    /// RMA operations posted as one xfer operation per remote segment.
    pub(crate) joins: Joins,
    /// Atomics whose completion the router finishes (fetched values to
    /// store, injects to drop).
    pub(crate) fetches: Fetches,
    /// The xfer endpoint reports the RMA peers apply to it (`FI_RMA_EVENT`).
    rma_events: bool,
    tx: Option<Arc<CqCore>>,
    pub(crate) rx: Option<Arc<CqCore>>,
    pub(crate) tx_selective: bool,
    rx_selective: bool,
    pub(crate) inject_size: usize,
    /// The counters bound (fi_cntr), fed by the router.
    pub(crate) counters: Counters,
    /// A counter is bound: completions are counted as they are routed.
    counted: bool,
    /// What the xfer CQ is polled into and the routing counts, under one
    /// lock that also keeps two threads from routing this endpoint at once
    /// (none under `FI_THREAD_DOMAIN`, where the application does).
    router: Latch<Router>,
    _av: Arc<AvCore>,
    /// The xfer provider underneath (`tcp`, `verbs`, `shm`).
    provider: &'static str,
}

/// An enabled endpoint's routing state.
struct Router {
    /// The completions of one poll, kept between reads: a fresh array of
    /// completions to fill and drop cost more than the poll itself.
    scratch: Vec<Completion>,
    /// Completions routed: logged when the endpoint closes, so a run can
    /// show that xfer carried its traffic.
    tally: Tally,
}

/// Completions an endpoint routed.
#[derive(Default)]
struct Tally {
    /// Sends and receives.
    sent: u64,
    received: u64,
    /// Of the sent, remote atomics (`FI_ATOMIC`).
    atomics: u64,
}

impl Drop for Enabled {
    fn drop(&mut self) {
        let r = &self.router.get_mut().tally;
        // Refusals no completion could report (atomics completed when
        // sent): libfabric has no call that reads them, so the close says,
        // with the atomics the device did (device atomic mode).
        let counters = self.ep.counters().unwrap_or_default();
        let counter = |name: &str| counters.iter().find(|(n, _)| *n == name).map_or(0, |&(_, v)| v);
        tracing::info!(
            provider = self.provider,
            sends = r.sent,
            receives = r.received,
            atomics = r.atomics,
            atomics_device = counter("atomics_device"),
            atomics_refused_after_completion = counter("atomics_refused_after_completion"),
            "xfer endpoint closed"
        );
    }
}

/// An endpoint's state.
pub(crate) struct EpCore {
    pub(crate) domain: Arc<DomainCore>,
    caps: u64,
    /// `FI_OPT_MIN_MULTI_RECV`: a multi-receive buffer with less free space
    /// is released.
    min_multi_recv: std::sync::atomic::AtomicUsize,
    /// Where the endpoint listens (`info->src_addr`, from `fi_getinfo`'s
    /// node and service with `FI_SOURCE`); else where xfer's settings say.
    listen: Option<std::net::SocketAddr>,
    pub(crate) tx_op_flags: u64,
    rx_op_flags: u64,
    bound: Mutex<Bound>,
    enabled: OnceLock<Enabled>,
    /// Messages claimed by `FI_PEEK | FI_CLAIM`, by the peek's context.
    pub(crate) claims: Mutex<FastMap<u64, (Claim, Peeked)>>,
    /// The job key: `ep_attr->auth_key`, else the domain's (else
    /// `XFER_JOB_KEY`'s, as every setting).
    auth_key: Option<Vec<u8>>,
    /// `FI_OPT_XFER_PROGRESS_TIMEOUT_MS`, until `fi_enable` opens the xfer
    /// endpoint with it (`XFER_PROGRESS_TIMEOUT_MS` to start with).
    pub(crate) progress_timeout_ms: std::sync::atomic::AtomicU64,
}

/// An endpoint object.
pub(crate) struct EpObj(pub(crate) Arc<EpCore>);

impl Core for EpObj {
    type Fid = fi::fid_ep;
    const CLASS: u32 = fi::FI_CLASS_EP;
    const MAGIC: u64 = 0x7866_6572_6570_5f5f; // "xferep__"
}

static OPS: fi::fi_ops = fi::fi_ops {
    size: std::mem::size_of::<fi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(control),
    ops_open: Some(entry::no_ops_open),
    tostr: Some(entry::no_tostr),
    ops_set: Some(entry::no_ops_set),
};

static EP_OPS: fi::fi_ops_ep = fi::fi_ops_ep {
    size: std::mem::size_of::<fi::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(no_tx_ctx),
    rx_ctx: Some(no_rx_ctx),
    rx_size_left: Some(no_size_left),
    tx_size_left: Some(no_size_left),
};

static CM_OPS: fi::fi_ops_cm = fi::fi_ops_cm {
    size: std::mem::size_of::<fi::fi_ops_cm>(),
    setname: Some(no_setname),
    getname: Some(getname),
    getpeer: Some(no_getpeer),
    connect: Some(no_connect),
    listen: Some(no_listen),
    accept: Some(no_accept),
    reject: Some(no_reject),
    shutdown: Some(no_shutdown),
    join: Some(no_join),
};

enosys! {
    no_tx_ctx(*mut fi::fid_ep, c_int, *mut fi::fi_tx_attr, *mut *mut fi::fid_ep, *mut c_void) -> c_int;
    no_rx_ctx(*mut fi::fid_ep, c_int, *mut fi::fi_rx_attr, *mut *mut fi::fid_ep, *mut c_void) -> c_int;
    no_size_left(*mut fi::fid_ep) -> isize;
    no_setname(fi::fid_t, *mut c_void, usize) -> c_int;
    no_getpeer(*mut fi::fid_ep, *mut c_void, *mut usize) -> c_int;
    no_connect(*mut fi::fid_ep, *const c_void, *const c_void, usize) -> c_int;
    no_listen(*mut fi::fid_pep) -> c_int;
    no_accept(*mut fi::fid_ep, *const c_void, usize) -> c_int;
    no_reject(*mut fi::fid_pep, fi::fid_t, *const c_void, usize) -> c_int;
    no_shutdown(*mut fi::fid_ep, u64) -> c_int;
    no_join(*mut fi::fid_ep, *const c_void, u64, *mut *mut fi::fid_mc, *mut c_void) -> c_int;
}

/// A send as the libfabric calls describe it.
pub(crate) struct Send {
    pub(crate) peer: u64,
    pub(crate) tag: Option<u64>,
    pub(crate) data: Option<u64>,
    pub(crate) buf: *const c_void,
    pub(crate) len: usize,
    /// The buffer's `fi_mr_desc` (used under `FI_MR_LOCAL`), or null.
    pub(crate) desc: *mut c_void,
    pub(crate) context: *mut c_void,
    /// `*msg` flags, or the endpoint's default transmit flags.
    pub(crate) flags: Option<u64>,
    /// Several buffers (`iov_count` > 1; `buf` is then null and `len`
    /// their total): gathered into a copy.
    pub(crate) segs: Vec<(*mut c_void, usize)>,
}

/// A receive as the libfabric calls describe it.
pub(crate) struct Recv {
    pub(crate) src: u64,
    /// `Some((tag, ignore))` for a tagged receive.
    pub(crate) tag: Option<(u64, u64)>,
    pub(crate) buf: *mut c_void,
    pub(crate) len: usize,
    /// The buffer's `fi_mr_desc` (used under `FI_MR_LOCAL`), or null.
    pub(crate) desc: *mut c_void,
    pub(crate) context: *mut c_void,
    /// `*msg` flags, or the endpoint's default receive flags.
    pub(crate) flags: Option<u64>,
    /// Several buffers (`iov_count` > 1; `buf` is then null and `len`
    /// their total): received through a staging buffer.
    pub(crate) segs: Vec<(*mut c_void, usize)>,
}

impl EpCore {
    /// Polls the endpoint's xfer completions, counts each on its counter
    /// and routes it to its transmit or receive CQ. `from` is the CQ being
    /// read (none for a counter's read): its successes go straight into
    /// `out` while it has room (the read's own array), the rest to the CQs'
    /// queues; other CQs are poked.
    ///
    /// The endpoint's xfer CQ has no other endpoint, so the poll goes to
    /// this endpoint's engine alone (`Endpoint::poll_alone`). Inlined into
    /// the CQ's read with nothing set up for the routing: a spinning
    /// reader's poll finds nothing most times.
    #[inline(always)]
    pub(crate) fn progress(&self, from: Option<&CqCore>, mut out: Option<&mut Out>) {
        let Some(en) = self.enabled.get() else { return };
        let mut router = en.router.lock();
        let n = poll(en, &mut router.scratch);
        if n == 0 {
            return;
        }
        // One plain completion for this read (a message's): no call.
        let Router { scratch, tally } = &mut *router;
        if n == 1 && Self::route_plain(en, &scratch[0], tally, from, out.as_deref_mut()) {
            return;
        }
        self.route_polled(en, &mut router, n, from, out);
    }

    /// [`progress`](Self::progress), out of line: for a CQ of several
    /// endpoints, and counters.
    #[inline(never)]
    pub(crate) fn drive(&self, from: Option<&CqCore>, out: Option<&mut Out>) {
        self.progress(from, out)
    }

    /// Routes the `n` completions a poll put in the router's scratch, and
    /// polls again while a poll filled it.
    #[inline(never)]
    fn route_polled(
        &self,
        en: &Enabled,
        router: &mut Router,
        mut n: usize,
        from: Option<&CqCore>,
        mut out: Option<&mut Out>,
    ) {
        let Router { scratch, tally } = router;
        loop {
            self.route(en, &scratch[..n], tally, from, out.as_deref_mut());
            if n < scratch.len() {
                return;
            }
            n = poll_again(en, scratch);
            if n == 0 {
                return;
            }
        }
    }

    /// Counts and routes the completions `polled` of one poll (see
    /// [`progress`](Self::progress)).
    #[inline]
    fn route(
        &self,
        en: &Enabled,
        polled: &[Completion],
        tally: &mut Tally,
        from: Option<&CqCore>,
        mut out: Option<&mut Out>,
    ) {
        for c in polled {
            if !Self::route_plain(en, c, tally, from, out.as_deref_mut()) {
                self.route_other(en, c, tally, from, out.as_deref_mut());
            }
        }
    }

    /// Routes a completion that is not [`route_plain`](Self::route_plain)'s:
    /// a token's, a counted one, a remote side's, a failure, or one for
    /// another CQ. Out of [`route`](Self::route)'s loop, so that the loop
    /// over plain completions sets up nothing for these cases.
    #[inline(never)]
    fn route_other(
        &self,
        en: &Enabled,
        c: &Completion,
        tally: &mut Tally,
        from: Option<&CqCore>,
        out: Option<&mut Out>,
    ) {
        if c.context == crate::peek::discard_context() {
            return; // a claimed message received into nothing (FI_DISCARD)
        }
        // A part of an RMA over several remote segments: the
        // operation completes with its last part.
        let joined;
        let c = match c.context & JOIN {
            0 => c,
            _ => match en.joins.part(c) {
                None => c,
                Some(None) => return,
                Some(Some(done)) => {
                    joined = done;
                    &joined
                }
            },
        };
        // An atomic the router finishes: its fetched value goes to
        // the application's buffer, its token becomes the context.
        let (fetched, quiet);
        let c = match c.context & FETCH {
            0 => {
                quiet = false;
                c
            }
            // SAFETY: the result buffer stays valid until the
            // atomic's completion (libfabric's contract): this one.
            _ => match unsafe { en.fetches.finish(c) } {
                None => {
                    quiet = false;
                    c
                }
                Some(f) => {
                    quiet = f.quiet;
                    fetched = {
                        let mut done = c.clone();
                        done.context = f.app;
                        done
                    };
                    &fetched
                }
            },
        };
        // A receive into several buffers, or of a multi-receive
        // buffer: its token becomes the application's context.
        let app = match c.context & (MULTI | SCATTER) {
            0 => None,
            _ => self.unstage(en, c),
        };
        if let Some(k) = en.counters.for_completion(c.flags) {
            k.hit(c.result.is_ok());
        }
        let remote = c.flags.contains(Flags::REMOTE_WRITE) || c.flags.contains(Flags::REMOTE_READ);
        if remote && en.rma_events {
            // Counters bound to the region (fi_mr_bind) count it too.
            self.domain.regions.hit(c.tag, c.flags, c.result.is_ok());
        }
        if quiet {
            return; // an inject: counted only, even when it failed
        }
        let silent = en.selective() && c.context & SILENT != 0;
        if silent && c.result.is_ok() {
            return; // no FI_COMPLETION asked: counted only
        }
        if remote && !c.flags.contains(Flags::REMOTE_CQ_DATA) {
            // An RMA event (FI_RMA_EVENT): for the remote counters;
            // only writes with data are the target CQ's (fi_cq(3)).
            return;
        }
        // Receives and the target's side of a write with data go to
        // the receive CQ (fi_cq(3): FI_REMOTE_WRITE completions are
        // the receiver's).
        let to = if c.flags.contains(Flags::RECV) || c.flags.contains(Flags::REMOTE_WRITE) {
            tally.received += 1;
            &en.rx
        } else {
            tally.sent += 1;
            tally.atomics += u64::from(c.flags.contains(Flags::ATOMIC));
            &en.tx
        };
        let Some(cq) = to else {
            xfer_core::warn_limited!(flags = c.flags.0, "completion with no CQ bound for it; dropped");
            return;
        };
        let mut e = Entry::from_xfer(c);
        if c.flags.contains(Flags::ATOMIC) {
            e.data = 0; // xfer's fetched value, stored above; no CQ data
        }
        if remote {
            e.tag = 0; // xfer's region key: no tag of the application's
        }
        if let Some((app, at, released)) = app {
            e.context = app;
            e.buf = at;
            e.flags |= released;
        }
        if silent {
            e.context &= !SILENT; // a failure is reported with the application's context
        }
        let mine = from.is_some_and(|f| std::ptr::eq(Arc::as_ptr(cq), f));
        if let (true, Some(o)) = (mine, out) {
            if e.error.is_some() {
                o.block();
            } else if o.put(&e) {
                return;
            }
        }
        match &c.result {
            Err(Error::UnknownSource(name)) => cq.push_with(e, !mine, self.source_name(name)),
            _ => cq.push(e, !mine),
        }
    }

    /// Routes a completion that has nothing to finish or count (no token in
    /// its context, no counter bound, not the target's side of an RMA, not
    /// an atomic, a success) and is for the CQ being read, into the read's
    /// array: true when it did. False, having done nothing, for any other
    /// completion or when the array is full; [`route`](Self::route) then
    /// takes it the whole way. A message's completion, the common case,
    /// skips every check for what it is not.
    #[inline(always)]
    fn route_plain(
        en: &Enabled,
        c: &Completion,
        tally: &mut Tally,
        from: Option<&CqCore>,
        out: Option<&mut Out>,
    ) -> bool {
        const TOKENS: u64 = JOIN | FETCH | MULTI | SCATTER | SILENT;
        const SIDES: u64 = Flags::REMOTE_WRITE.0 | Flags::REMOTE_READ.0 | Flags::ATOMIC.0;
        let (Some(from), Some(out)) = (from, out) else {
            return false;
        };
        if c.context & TOKENS != 0 || c.flags.0 & SIDES != 0 || en.counted || c.result.is_err() {
            return false;
        }
        let recv = c.flags.contains(Flags::RECV);
        let to = if recv { &en.rx } else { &en.tx };
        let mine = to.as_ref().is_some_and(|cq| std::ptr::eq(Arc::as_ptr(cq), from));
        if !mine || c.context == crate::peek::discard_context() || !out.put(&Entry::from_xfer(c)) {
            return false;
        }
        match recv {
            true => tally.received += 1,
            false => tally.sent += 1,
        }
        true
    }

    /// The application's context (SILENT kept where it was), where the data
    /// landed and `FI_MULTI_RECV` when it released its buffer, for a
    /// completion whose context is a staging or multi-receive token; `None`
    /// when it is no live token.
    #[cold]
    fn unstage(&self, en: &Enabled, c: &Completion) -> Option<(u64, u64, u64)> {
        let silent = c.context & SILENT;
        if c.context & MULTI != 0 {
            let s = self.multi_step(en, c)?;
            let released = if s.released { fi::FI_MULTI_RECV } else { 0 };
            return Some((s.app | silent, s.at, released));
        }
        // A failed read brought nothing: its buffers are left as they were.
        let len = match c.result.is_err() && c.flags.contains(Flags::READ) {
            true => 0,
            false => c.len,
        };
        // SAFETY: the receive's (or read's) segments are valid until its
        // completion, which this is.
        let app = unsafe { en.scatters.finish(c.context & !SILENT, len) }?;
        Some((app | silent, 0, 0))
    }

    /// The address of an unknown sender (`FI_SOURCE_ERR`) in the AV's
    /// format, what `fi_av_insert` takes: the `err_data` of its entry.
    #[cold]
    fn source_name(&self, name: &Address) -> Option<Vec<u8>> {
        self.domain.format.encode(name)
    }

    /// A message of a multi-receive buffer completed: posts the next
    /// receive into the rest of the buffer unless it is released (or the
    /// post fails, which releases it).
    fn multi_step(&self, en: &Enabled, c: &Completion) -> Option<crate::multi::Step> {
        let token = c.context & !SILENT;
        let min = self.min_multi_recv.load(std::sync::atomic::Ordering::Relaxed);
        // A message from an unknown sender (FI_SOURCE_ERR) was delivered:
        // the buffer goes on like after a success.
        let delivered = matches!(c.result, Ok(()) | Err(Error::UnknownSource(_)));
        let mut step = en.multis.advance(token, c.len, delivered, min)?;
        if let Some(rest) = step.rest.take() {
            let op = RecvOp {
                spec: RecvSpec {
                    src: rest.src,
                    tag: 0,
                    ignore: 0,
                },
                tagged: false,
                // SAFETY: the application's multi-receive buffer, valid
                // until its release (libfabric's contract).
                buf: unsafe { Buffer::raw(rest.buf, rest.len) },
                context: c.context,
            };
            if let Err(r) = en.ep.post_recv(op) {
                tracing::warn!(error = %r.error, "re-posting a multi-receive buffer; released");
                en.multis.release(token);
                step.released = true;
            }
        }
        Some(step)
    }

    /// Arms the xfer CQ for a blocking wait: false when completions are ready.
    pub(crate) fn ready_to_block(&self) -> bool {
        match self.enabled.get() {
            Some(en) => en.cq.trywait().is_ok(),
            None => true,
        }
    }

    /// Posts a send (`fi_send`, `fi_tsend`, `*data`, `*msg`). Inlined into
    /// each, as [`recv`](Self::recv) is.
    #[inline(always)]
    pub(crate) fn send(&self, s: Send) -> isize {
        let cap = if s.tag.is_some() { fi::FI_TAGGED } else { fi::FI_MSG };
        let en = match self.tx_ready(cap) {
            Ok(en) => en,
            Err(e) => return e,
        };
        if s.len > MAX_MSG_SIZE {
            return scode(-(libc::EMSGSIZE));
        }
        if s.buf.is_null() && s.len > 0 && s.segs.is_empty() {
            return scode(-(libc::EINVAL));
        }
        let flags = s.flags.unwrap_or(self.tx_op_flags);
        let buf = if !s.segs.is_empty() {
            if flags & fi::FI_INJECT != 0 && s.len > en.inject_size {
                return scode(-(libc::EMSGSIZE));
            }
            // SAFETY: libfabric's contract: each element is valid for its length.
            Buffer::from(unsafe { crate::iov::gather(&s.segs) })
        } else if flags & fi::FI_INJECT != 0 {
            if s.len > en.inject_size {
                return scode(-(libc::EMSGSIZE));
            }
            // SAFETY: checked non-null for len > 0; the caller's buffer.
            Buffer::from(unsafe { bytes(s.buf, s.len) }.to_vec())
        } else {
            // SAFETY: libfabric's contract: the buffer stays valid and
            // untouched until the send's completion (or the endpoint
            // closes), and so does the region `desc` names.
            match unsafe { self.buffer(s.buf as *mut c_void, s.len, s.desc) } {
                Ok(b) => b,
                Err(e) => return e,
            }
        };
        let (context, completion) = match en.completion(s.context, flags, en.counters.send.is_some()) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let level = if flags & fi::FI_DELIVERY_COMPLETE != 0 {
            CompletionLevel::Delivery
        } else if flags & fi::FI_TRANSMIT_COMPLETE != 0 {
            CompletionLevel::Transmit
        } else {
            CompletionLevel::Inject
        };
        let op = SendOp {
            peer: PeerAddr(s.peer),
            tag: s.tag,
            data: s.data,
            buf,
            context,
            completion,
            level,
        };
        match en.ep.post_send(op) {
            Ok(()) => 0,
            Err(r) => refused(&r.error),
        }
    }

    /// Posts a receive (`fi_recv`, `fi_trecv`, `*msg`). Without
    /// `FI_DIRECTED_RECV` the source address is ignored, as fi_msg(3) says.
    ///
    /// Inlined into each entry point, so that a call with one buffer
    /// (`fi_trecv`, what Open MPI's MTL posts) builds no `Recv` and checks
    /// no segments: the receive goes from the caller's arguments to the
    /// engine's `post_recv`.
    #[inline(always)]
    pub(crate) fn recv(&self, r: Recv) -> isize {
        let en = match self.rx_ready(r.tag.is_some()) {
            Ok(en) => en,
            Err(e) => return e,
        };
        if r.buf.is_null() && r.len > 0 && r.segs.is_empty() {
            return scode(-(libc::EINVAL));
        }
        let flags = r.flags.unwrap_or(self.rx_op_flags);
        let context = match en.recv_context(r.context, flags) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let src = self.source(r.src);
        if !r.segs.is_empty() || flags & fi::FI_MULTI_RECV != 0 {
            return self.recv_staged(en, r, flags, context, src);
        }
        let (tag, ignore) = r.tag.unwrap_or((0, 0));
        // SAFETY: libfabric's contract: the buffer stays valid and untouched
        // until the receive's completion, and so does the region `desc` names.
        let buf = match unsafe { self.buffer(r.buf, r.len, r.desc) } {
            Ok(b) => b,
            Err(e) => return e,
        };
        let op = RecvOp {
            spec: RecvSpec { src, tag, ignore },
            tagged: r.tag.is_some(),
            buf,
            context,
        };
        match en.ep.post_recv(op) {
            Ok(()) => 0,
            Err(r) => refused(&r.error),
        }
    }

    /// A receive into several buffers (staged, [`Scatters`]) or into a
    /// multi-receive buffer ([`Multis`]): its xfer context is a token the
    /// router maps back to `context`.
    #[cold]
    fn recv_staged(&self, en: &Enabled, r: Recv, flags: u64, context: u64, src: PeerAddr) -> isize {
        let silent = context & SILENT;
        // A default FI_MULTI_RECV (rx_attr->op_flags) is for untagged receives.
        let multi = flags & fi::FI_MULTI_RECV != 0 && (r.tag.is_none() || r.flags.is_some());
        if r.segs.is_empty() && !multi {
            return self.recv(Recv {
                flags: Some(flags & !fi::FI_MULTI_RECV),
                ..r
            });
        }
        let (token, buf, release): (u64, Buffer, fn(&Enabled, u64)) = if multi {
            if self.caps & fi::FI_MULTI_RECV == 0 || r.tag.is_some() || !r.segs.is_empty() {
                return scode(-(libc::EINVAL));
            }
            let (token, rest) = en.multis.start(context & !SILENT, r.buf, r.len, src);
            // SAFETY: libfabric's contract: the buffer is the provider's
            // until the completion that releases it.
            (token, unsafe { Buffer::raw(rest.buf, rest.len) }, |en, t| {
                en.multis.release(t)
            })
        } else {
            // The router copies the staging buffer into the segments.
            let (token, ptr, total) = en.scatters.stage(context & !SILENT, &r.segs);
            // SAFETY: the staging buffer lives in `scatters` until the
            // receive completes (or the endpoint is gone).
            (token, unsafe { Buffer::raw(ptr, total) }, |en, t| en.scatters.forget(t))
        };
        let (tag, ignore) = r.tag.unwrap_or((0, 0));
        let op = RecvOp {
            spec: RecvSpec { src, tag, ignore },
            tagged: r.tag.is_some(),
            buf,
            context: token | silent,
        };
        match en.ep.post_recv(op) {
            Ok(()) => 0,
            Err(e) => {
                release(en, token);
                scode(entry::code(&e.error))
            }
        }
    }

    /// The xfer buffer for `len` bytes at `buf`. Under `FI_MR_LOCAL` a
    /// `desc` from `fi_mr_desc` makes it a buffer of that region (its keys
    /// travel with it: verbs uses them instead of its registration cache,
    /// decision 41); a `desc` that is not one of this plug-in's regions, or
    /// a range outside it, is `-FI_EINVAL`. Without `FI_MR_LOCAL`, or with
    /// a null `desc`, a raw buffer.
    ///
    /// # Safety
    /// As [`Buffer::raw`]: the memory (and the region) stay valid and
    /// untouched until the operation completes.
    #[inline]
    pub(crate) unsafe fn buffer(&self, buf: *mut c_void, len: usize, desc: *mut c_void) -> Result<Buffer, isize> {
        if desc.is_null() || !self.domain.mr_local {
            // SAFETY: the caller's contract.
            return Ok(unsafe { Buffer::raw(buf.cast::<u8>(), len) });
        }
        // SAFETY: forwarded.
        unsafe { Self::region_buffer(buf, len, desc) }
    }

    /// [`buffer`](Self::buffer) of a region's `desc` under `FI_MR_LOCAL`.
    ///
    /// # Safety
    /// As [`buffer`](Self::buffer).
    #[cold]
    unsafe fn region_buffer(buf: *mut c_void, len: usize, desc: *mut c_void) -> Result<Buffer, isize> {
        // SAFETY: under FI_MR_LOCAL a non-null desc is what fi_mr_desc gave
        // (fi_mr(3)): the fid of a live region, checked by class and magic.
        let Some(region) = (unsafe { crate::mr::region(desc) }) else {
            return Err(scode(-(libc::EINVAL)));
        };
        let offset = (buf as usize).wrapping_sub(region.addr() as usize);
        // SAFETY: the caller's contract; `buffer` checks the range.
        unsafe { region.buffer(offset, len) }.map_err(|e| scode(entry::code(&e)))
    }

    /// The enabled endpoint, if it has capability `cap` and a transmit CQ.
    pub(crate) fn tx_ready(&self, cap: u64) -> Result<&Enabled, isize> {
        let Some(en) = self.enabled.get() else {
            return Err(scode(fi::err(fi::FI_EOPBADSTATE)));
        };
        if self.caps & cap == 0 {
            return Err(scode(-(libc::EOPNOTSUPP)));
        }
        if en.tx.is_none() {
            return Err(scode(fi::err(fi::FI_ENOCQ)));
        }
        Ok(en)
    }

    /// The enabled endpoint, if it can take a receive (tagged or not).
    pub(crate) fn rx_ready(&self, tagged: bool) -> Result<&Enabled, isize> {
        let Some(en) = self.enabled.get() else {
            return Err(scode(fi::err(fi::FI_EOPBADSTATE)));
        };
        let cap = if tagged { fi::FI_TAGGED } else { fi::FI_MSG };
        if self.caps & cap == 0 {
            return Err(scode(-(libc::EOPNOTSUPP)));
        }
        if en.rx.is_none() {
            return Err(scode(fi::err(fi::FI_ENOCQ)));
        }
        Ok(en)
    }

    /// A receive's source: ignored without `FI_DIRECTED_RECV`, as fi_msg(3) says.
    pub(crate) fn source(&self, src: fi::fi_addr_t) -> PeerAddr {
        match self.caps & fi::FI_DIRECTED_RECV {
            0 => PeerAddr::UNSPEC,
            _ => PeerAddr(src),
        }
    }

    /// `fi_inject`, `fi_tinject`, `fi_injectdata`, `fi_tinjectdata`: copied,
    /// no completion. Inlined into each, so that its `tag` and `data`
    /// choose the engine's call with no test at run time.
    #[inline(always)]
    pub(crate) fn inject(
        &self,
        peer: u64,
        tag: Option<u64>,
        data: Option<u64>,
        buf: *const c_void,
        len: usize,
    ) -> isize {
        let Some(en) = self.enabled.get() else {
            return scode(fi::err(fi::FI_EOPBADSTATE));
        };
        let cap = if tag.is_some() { fi::FI_TAGGED } else { fi::FI_MSG };
        if self.caps & cap == 0 {
            return scode(-(libc::EOPNOTSUPP));
        }
        if len > en.inject_size {
            return scode(-(libc::EMSGSIZE));
        }
        if buf.is_null() && len > 0 {
            return scode(-(libc::EINVAL));
        }
        // SAFETY: checked non-null for len > 0; the caller's buffer.
        let payload = unsafe { bytes(buf, len) };
        let peer = PeerAddr(peer);
        let r = match (tag, data) {
            (None, None) => en.ep.inject(peer, payload),
            (Some(t), None) => en.ep.tinject(peer, t, payload),
            (None, Some(d)) => en.ep.inject_data(peer, payload, d),
            (Some(t), Some(d)) => en.ep.tinject_data(peer, t, payload, d),
        };
        match r {
            Ok(()) => {
                if let Some(k) = &en.counters.send {
                    k.hit(true); // copied: an inject's completion
                }
                0
            }
            Err(e) => refused(&e),
        }
    }
}

/// The `-FI_E*` return of an operation the engine refused, out of the
/// posting path's way.
#[cold]
fn refused(e: &Error) -> isize {
    scode(entry::code(e))
}

impl Enabled {
    /// Whether either CQ was bound with `FI_SELECTIVE_COMPLETION` (only then
    /// can a completion carry [`SILENT`]).
    pub(crate) fn selective(&self) -> bool {
        self.tx_selective || self.rx_selective
    }

    /// The xfer context and completion request of a send or RMA with these
    /// flags: its own context and a completion, unless the transmit CQ is
    /// selective and `FI_COMPLETION` is not asked; then no completion (xfer
    /// still reports a failure), or, when a counter counts it (`counted`), a
    /// completion marked [`SILENT`].
    pub(crate) fn completion(&self, context: *mut c_void, flags: u64, counted: bool) -> Result<(u64, bool), isize> {
        let ctx = self.checked(context)?;
        Ok(if !self.tx_selective || flags & fi::FI_COMPLETION != 0 {
            (ctx, true)
        } else if counted {
            (ctx | SILENT, true)
        } else {
            (ctx, false)
        })
    }

    /// The xfer context of a receive with these flags: marked [`SILENT`]
    /// when the receive CQ is selective and `FI_COMPLETION` is not asked
    /// (every xfer receive completes; the router drops it unless it failed).
    pub(crate) fn recv_context(&self, context: *mut c_void, flags: u64) -> Result<u64, isize> {
        let ctx = self.checked(context)?;
        Ok(match self.rx_selective && flags & fi::FI_COMPLETION == 0 {
            true => ctx | SILENT,
            false => ctx,
        })
    }

    /// An application context as xfer's, refused on a selective endpoint
    /// when it has the [`SILENT`] bit.
    fn checked(&self, context: *mut c_void) -> Result<u64, isize> {
        let ctx = context as usize as u64;
        match self.selective() && ctx & SILENT != 0 {
            true => Err(scode(-(libc::EINVAL))),
            false => Ok(ctx),
        }
    }
}

/// The bytes of a C buffer.
///
/// # Safety
/// `buf` is valid for `len` bytes, or `len` is 0.
pub(crate) unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    match len {
        0 => &[],
        // SAFETY: the caller's contract.
        _ => unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) },
    }
}

/// Runs `f` on the endpoint behind `ep` (`-FI_EINVAL` when it is not one).
pub(crate) fn with_ep(ep: *mut fi::fid_ep, f: impl FnOnce(&EpCore) -> isize) -> isize {
    guard(scode(PANIC), || {
        // SAFETY: libfabric passes the application's fid_ep.
        match unsafe { Obj::<EpObj>::get(ep.cast()) } {
            Some(obj) => f(&obj.core.0),
            None => scode(-(libc::EINVAL)),
        }
    })
}

/// `fi_endpoint`: `FI_EP_RDM` only, with the fi_info's capabilities (all of
/// xfer's when it names none).
pub(crate) unsafe extern "C" fn open(
    domain: *mut fi::fid_domain,
    info: *mut fi::fi_info,
    ep: *mut *mut fi::fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our domain.
        let Some(domain) = (unsafe { domain::get(domain) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: the application's fi_info, attributes null or valid.
        let Some(info) = (unsafe { info.as_ref() }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: as above.
        if let Some(ep_attr) = unsafe { info.ep_attr.as_ref() } {
            if ep_attr.type_ != fi::FI_EP_RDM && ep_attr.type_ != fi::FI_EP_UNSPEC {
                return -(libc::EINVAL);
            }
        }
        let caps = if info.caps == 0 { DEFAULT_CAPS } else { info.caps };
        if caps & !CAPS != 0 || (caps & fi::FI_ATOMIC != 0 && !domain.xfer.atomics()) {
            return -(libc::ENODATA);
        }
        let listen = match (info.src_addr.is_null(), info.src_addrlen) {
            (false, n) if n > 0 => {
                // SAFETY: the application's src_addr holds src_addrlen bytes.
                let bytes = unsafe { std::slice::from_raw_parts(info.src_addr.cast::<u8>(), n) };
                match domain.format.listen_addr(bytes) {
                    Some(at) if matches!(domain.xfer.provider(), "tcp" | "shm+tcp") => Some(at),
                    _ => return -(libc::EINVAL),
                }
            }
            _ => None,
        };
        if let Some(at) = listen.filter(|a| a.port() != 0) {
            // A service in use is reported here, where libfabric's socket
            // providers report it, rather than only at fi_enable (which
            // still fails if the port is taken in between).
            if let Err(e) = std::net::TcpListener::bind(at) {
                tracing::warn!(%at, error = %e, "fi_endpoint: cannot listen on the source address");
                return -e.raw_os_error().unwrap_or(libc::EADDRINUSE);
            }
        }
        // SAFETY: as above; the application's key holds auth_key_size bytes.
        let own_key =
            match unsafe { info.ep_attr.as_ref() }.map(|a| unsafe { crate::auth::read(a.auth_key, a.auth_key_size) }) {
                Some(Err(why)) => {
                    tracing::warn!(why, "fi_endpoint: auth_key refused");
                    return -(libc::EINVAL);
                }
                Some(Ok(k)) => k,
                None => None,
            };
        // Every xfer provider admits only peers that prove the key: TCP,
        // shm and their pair in the RDM engine's handshake, verbs in
        // rdma_cm's private data.
        let auth_key = own_key.or_else(|| domain.auth_key.clone());
        // SAFETY: as above.
        let tx_op_flags = unsafe { info.tx_attr.as_ref() }.map_or(0, |tx| tx.op_flags);
        // SAFETY: as above.
        let rx_op_flags = unsafe { info.rx_attr.as_ref() }.map_or(0, |rx| rx.op_flags);
        let core = EpCore {
            domain,
            caps,
            min_multi_recv: std::sync::atomic::AtomicUsize::new(crate::multi::DEFAULT_MIN),
            listen,
            tx_op_flags,
            rx_op_flags,
            bound: Mutex::new(Bound::default()),
            enabled: OnceLock::new(),
            claims: Mutex::new(FastMap::default()),
            auth_key,
            progress_timeout_ms: EndpointAttr::from_env().progress_timeout_ms.into(),
        };
        let fid = fi::fid_ep {
            fid: entry::fid(fi::FI_CLASS_EP, context, &OPS),
            ops: entry::ops(&EP_OPS),
            cm: entry::ops(&CM_OPS),
            msg: entry::ops(&crate::msg::OPS),
            rma: entry::ops(&crate::rma::OPS),
            tagged: entry::ops(&crate::tagged::OPS),
            atomic: entry::ops(&crate::atomic::OPS),
            collective: entry::ops(&crate::unsupported::COLLECTIVE_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(ep, fid, EpObj(Arc::new(core))) }
    })
}

/// `fi_ep_bind`: an AV, CQs with `FI_TRANSMIT` and/or `FI_RECV` (and
/// `FI_SELECTIVE_COMPLETION`: on receives, only those that ask for a
/// completion are accepted), an EQ (which will stay empty).
/// Counters: `-FI_ENOSYS`.
unsafe extern "C" fn bind(fid: *mut fi::fid, bfid: *mut fi::fid, flags: u64) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fids.
        let (Some(obj), false) = (unsafe { Obj::<EpObj>::get(fid) }, bfid.is_null()) else {
            return -(libc::EINVAL);
        };
        let ep = &obj.core.0;
        if ep.enabled.get().is_some() {
            return fi::err(fi::FI_EOPBADSTATE);
        }
        let mut b = lock(&ep.bound);
        // SAFETY: non-null, a live fid.
        let class = unsafe { (*bfid).fclass } as u32;
        match class {
            fi::FI_CLASS_CQ => {
                // SAFETY: a live fid.
                let Some(cq) = (unsafe { cq::get(bfid) }) else {
                    return -(libc::EINVAL);
                };
                if !Arc::ptr_eq(&cq.domain, &ep.domain) || flags & (fi::FI_TRANSMIT | fi::FI_RECV) == 0 {
                    return -(libc::EINVAL);
                }
                if flags & fi::FI_TRANSMIT != 0 {
                    b.tx = Some(cq.clone());
                    b.tx_selective = flags & fi::FI_SELECTIVE_COMPLETION != 0;
                }
                if flags & fi::FI_RECV != 0 {
                    b.rx = Some(cq);
                    b.rx_selective = flags & fi::FI_SELECTIVE_COMPLETION != 0;
                }
                0
            }
            fi::FI_CLASS_AV => {
                // SAFETY: a live fid.
                let Some(av) = (unsafe { av::get(bfid) }) else {
                    return -(libc::EINVAL);
                };
                if !Arc::ptr_eq(&av.domain, &ep.domain) {
                    return -(libc::EINVAL);
                }
                b.av = Some(av);
                0
            }
            fi::FI_CLASS_EQ => 0,
            fi::FI_CLASS_CNTR => {
                // SAFETY: a live fid.
                let Some(k) = (unsafe { cntr::get(bfid) }) else {
                    return -(libc::EINVAL);
                };
                let mut kinds = fi::FI_SEND | fi::FI_RECV | fi::FI_WRITE | fi::FI_READ;
                // Remote counters need FI_RMA_EVENT (fi_cntr(3)).
                if ep.caps & fi::FI_RMA_EVENT != 0 {
                    kinds |= fi::FI_REMOTE_WRITE | fi::FI_REMOTE_READ;
                }
                if !Arc::ptr_eq(&k.domain, &ep.domain) || flags == 0 || flags & !kinds != 0 {
                    return -(libc::EINVAL);
                }
                let c = &mut b.counters;
                for (bit, slot) in [
                    (fi::FI_SEND, &mut c.send),
                    (fi::FI_RECV, &mut c.recv),
                    (fi::FI_WRITE, &mut c.write),
                    (fi::FI_READ, &mut c.read),
                    (fi::FI_REMOTE_WRITE, &mut c.remote_write),
                    (fi::FI_REMOTE_READ, &mut c.remote_read),
                ] {
                    if flags & bit != 0 {
                        *slot = Some(k.clone());
                    }
                }
                0
            }
            _ => -(libc::ENOSYS),
        }
    })
}

/// Takes `ep` out of the CQs and counters that drive it.
fn detach<'a>(ep: &EpCore, cqs: impl Iterator<Item = &'a Arc<CqCore>>, counters: &Counters) {
    for cq in cqs {
        cq.eps.detach(ep);
    }
    for k in counters.all() {
        k.eps.detach(ep);
    }
    ep.domain.regions.eps.detach(ep);
}

/// `fi_enable`: opens the xfer endpoint on the bound AV.
fn enable(ep: &Arc<EpCore>) -> c_int {
    let b = lock(&ep.bound);
    if ep.enabled.get().is_some() {
        return 0;
    }
    let Some(av) = b.av.clone() else {
        return fi::err(fi::FI_ENOAV);
    };
    if b.tx.is_none() && b.rx.is_none() {
        return fi::err(fi::FI_ENOCQ);
    }
    let xcq = match ep.domain.xfer.cq(&CqAttr::from_env()) {
        Ok(cq) => cq,
        Err(e) => return entry::code(&e),
    };
    let mut attr = EndpointAttr::from_env();
    attr.selective_completion = b.tx_selective;
    // Only when the application asked for it, whatever XFER_SOURCE_ERR says.
    attr.source_err = ep.caps & fi::FI_SOURCE_ERR != 0;
    // RMA targeting this endpoint is reported for its remote counters.
    attr.rma_events = ep.caps & fi::FI_RMA_EVENT != 0;
    if let Some(at) = ep.listen {
        attr.params.set("tcp.addr", at.to_string());
    }
    if let Some(k) = &ep.auth_key {
        attr.job_key = Some(JobKey(k.clone()));
    }
    attr.progress_timeout_ms = ep.progress_timeout_ms.load(std::sync::atomic::Ordering::Relaxed);
    let xep = match ep.domain.xfer.endpoint(&xcq, &av.xfer, &attr) {
        Ok(e) => e,
        Err(e) => {
            match ep.listen {
                Some(at) => tracing::warn!(error = %e, %at, "fi_enable: cannot listen on the source address"),
                None => tracing::warn!(error = %e, "fi_enable: opening the xfer endpoint"),
            }
            return entry::code(&e);
        }
    };
    let waits = b.tx.iter().chain(b.rx.iter()).any(|cq| cq.waits()) || b.counters.all().any(|k| k.waits());
    let fd = if waits { xcq.fd() } else { -1 };
    let attached =
        b.tx.iter()
            .chain(b.rx.iter())
            .try_for_each(|cq| cq.attach(ep, fd))
            .and_then(|()| b.counters.all().try_for_each(|k| k.attach(ep, fd)))
            .and_then(|()| match attr.rma_events {
                // Counters bound to regions drive it: RMA events arrive here.
                true => ep.domain.regions.eps.attach(ep, None, fd),
                false => Ok(()),
            });
    if let Err(e) = attached {
        detach(ep, b.tx.iter().chain(b.rx.iter()), &b.counters);
        return entry::code(&e);
    }
    let en = Enabled {
        ep: xep,
        cq: xcq,
        tx: b.tx.clone(),
        rx: b.rx.clone(),
        tx_selective: b.tx_selective,
        rx_selective: b.rx_selective,
        inject_size: attr.inject_size,
        counters: b.counters.clone(),
        counted: b.counters.all().next().is_some(),
        scatters: Scatters::default(),
        multis: Multis::default(),
        joins: Joins::default(),
        fetches: Fetches::default(),
        rma_events: attr.rma_events,
        router: Latch::new(
            Router {
                scratch: vec![Completion::EMPTY; POLL_BATCH],
                tally: Tally::default(),
            },
            ep.domain.serial(),
        ),
        _av: av,
        provider: ep.domain.xfer.provider(),
    };
    let _ = ep.enabled.set(en);
    tracing::debug!(name = ?ep.enabled.get().map(|e| e.ep.name()), "endpoint enabled");
    0
}

unsafe extern "C" fn control(fid: *mut fi::fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(obj) = (unsafe { Obj::<EpObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        match command as u32 {
            fi::FI_ENABLE => enable(&obj.core.0),
            _ => -(libc::ENOSYS),
        }
    })
}

/// `fi_getname`: the enabled endpoint's name in the domain's address
/// format ([`crate::name::NAME_LEN`] bytes, or a `sockaddr_in`/`sockaddr_in6`).
unsafe extern "C" fn getname(fid: fi::fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(obj) = (unsafe { Obj::<EpObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        if addrlen.is_null() {
            return -(libc::EINVAL);
        }
        let Some(en) = obj.core.0.enabled.get() else {
            return fi::err(fi::FI_EOPBADSTATE);
        };
        let Some(bytes) = obj.core.0.domain.format.encode(&en.ep.name()) else {
            return -(libc::EINVAL);
        };
        // SAFETY: checked non-null; the caller's buffer of *addrlen bytes.
        unsafe { av::copy_out(&bytes, addr, addrlen) }
    })
}

/// `fi_cancel`: the posted receive with this context completes with
/// `FI_ECANCELED` (read through `fi_cq_readerr`); `-FI_ENOENT` when none waits.
unsafe extern "C" fn cancel(fid: fi::fid_t, context: *mut c_void) -> isize {
    with_ep(fid.cast(), |ep| match ep.enabled.get() {
        Some(en) => {
            let ctx = context as usize as u64;
            // A receive posted without FI_COMPLETION carries the SILENT bit,
            // one into several buffers a staging token.
            let mut tried = vec![ctx];
            if en.rx_selective {
                tried.push(ctx | SILENT);
            }
            for token in en.scatters.tokens_of(ctx).into_iter().chain(en.multis.tokens_of(ctx)) {
                tried.push(token);
                tried.push(token | SILENT);
            }
            let mut last = scode(-(libc::ENOENT));
            for c in tried {
                match en.ep.cancel(c) {
                    Ok(()) => return 0,
                    Err(xfer_facade::Error::NotFound(_)) => {}
                    Err(e) => last = scode(entry::code(&e)),
                }
            }
            last
        }
        None => scode(fi::err(fi::FI_EOPBADSTATE)),
    })
}

/// `fi_getopt` (level `FI_OPT_ENDPOINT`): `FI_OPT_CM_DATA_SIZE` is 0 (RDM
/// endpoints have no connection management to carry data);
/// `FI_OPT_MIN_MULTI_RECV` on endpoints with `FI_MULTI_RECV` (elsewhere
/// `-FI_ENOPROTOOPT`); the options of capabilities xfer does not offer
/// (`FI_OPT_BUFFERED_*` of `FI_BUFFERED_RECV`) and the rest
/// are `-FI_ENOPROTOOPT`, as libfabric's providers answer an option they
/// do not have.
unsafe extern "C" fn getopt(fid: fi::fid_t, level: c_int, name: c_int, val: *mut c_void, len: *mut usize) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(obj) = (unsafe { Obj::<EpObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        let ep = &obj.core.0;
        if level as u32 != fi::FI_OPT_ENDPOINT {
            return -(libc::ENOPROTOOPT);
        }
        // SAFETY: forwarded: the caller's buffer and length.
        if let Some(r) = unsafe { opt::get(ep, name, val, len) } {
            return r;
        }
        match name as u32 {
            fi::FI_OPT_MIN_MULTI_RECV if ep.caps & fi::FI_MULTI_RECV != 0 => {
                if val.is_null() || len.is_null() {
                    return -(libc::EINVAL);
                }
                // SAFETY: checked non-null; the caller's length.
                let room = unsafe { *len };
                // SAFETY: as above.
                unsafe { *len = std::mem::size_of::<usize>() };
                if room < std::mem::size_of::<usize>() {
                    return fi::err(fi::FI_ETOOSMALL);
                }
                let v = ep.min_multi_recv.load(std::sync::atomic::Ordering::Relaxed);
                // SAFETY: the caller's buffer holds at least a size_t.
                unsafe { val.cast::<usize>().write_unaligned(v) };
                0
            }
            fi::FI_OPT_CM_DATA_SIZE => {
                if val.is_null() || len.is_null() {
                    return -(libc::EINVAL);
                }
                // SAFETY: checked non-null; the caller's length.
                let room = unsafe { *len };
                // SAFETY: as above.
                unsafe { *len = std::mem::size_of::<usize>() };
                if room < std::mem::size_of::<usize>() {
                    return fi::err(fi::FI_ETOOSMALL);
                }
                // SAFETY: the caller's buffer holds at least a size_t.
                unsafe { val.cast::<usize>().write_unaligned(0) };
                0
            }
            _ => -(libc::ENOPROTOOPT),
        }
    })
}

/// `fi_setopt`: `FI_OPT_MIN_MULTI_RECV` on endpoints with `FI_MULTI_RECV`
/// (a `size_t`; `-FI_EINVAL` shorter). `FI_OPT_CM_DATA_SIZE` is read-only
/// and the other options belong to capabilities xfer does not offer:
/// `-FI_ENOPROTOOPT`.
unsafe extern "C" fn setopt(fid: fi::fid_t, level: c_int, name: c_int, val: *const c_void, len: usize) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(obj) = (unsafe { Obj::<EpObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        let ep = &obj.core.0;
        if level as u32 == fi::FI_OPT_ENDPOINT {
            // SAFETY: forwarded: the caller's value and length.
            if let Some(r) = unsafe { opt::set(ep, name, val, len) } {
                return r;
            }
        }
        let multi = ep.caps & fi::FI_MULTI_RECV != 0;
        match (level as u32, name as u32) {
            (fi::FI_OPT_ENDPOINT, fi::FI_OPT_MIN_MULTI_RECV) if multi => {
                if val.is_null() || len < std::mem::size_of::<usize>() {
                    return -(libc::EINVAL);
                }
                // SAFETY: checked: the caller's value holds a size_t.
                let v = unsafe { val.cast::<usize>().read_unaligned() };
                ep.min_multi_recv.store(v, std::sync::atomic::Ordering::Relaxed);
                0
            }
            _ => -(libc::ENOPROTOOPT),
        }
    })
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the fid being closed, no longer in use.
        match unsafe { Obj::<EpObj>::take(fid) } {
            Some(obj) => {
                let ep = &obj.core.0;
                if let Some(en) = ep.enabled.get() {
                    // Its CQs and counters held it for their reads.
                    detach(ep, en.tx.iter().chain(en.rx.iter()), &en.counters);
                }
                drop(obj);
                0
            }
            None => -(libc::EBADF),
        }
    })
}
