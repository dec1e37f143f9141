//! The runtime-agnostic core: a completion queue's completions routed to the
//! futures waiting for them, by operation context.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use slab::Slab;

use super::reactor::Reactor;
use super::spin::Spin;
use crate::{Completion, CompletionQueue, Error, Result};

/// The high 16 bits of every context the async layer gives an operation;
/// completions whose context lacks them go to [`Dispatcher::next_completion`].
pub const CONTEXT_TAG: u64 = 0xa5f0 << 48;
/// Below the tag: a 16-bit generation, then the slot's key (32 bits), so a
/// context is not reused while an older holder of its slot may still name it.
const ID_MASK: u64 = (1 << 48) - 1;
const KEY_MASK: u64 = (1 << 32) - 1;

/// The spin window when `XFER_AIO_SPIN_US` does not set one (decision 70).
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Completions taken from the queue per [`Dispatcher::drive`] round.
const BATCH: usize = 4;
/// Rounds of progress a future makes in one poll before yielding to the
/// runtime, so that a flood of other completions cannot starve it.
const BUDGET: usize = 32;

/// Where an operation is.
enum Slot {
    /// Posted; the waker of the future waiting for it, if it has polled.
    Waiting(Option<Waker>),
    /// Its completion arrived and waits for its future.
    Done(Completion),
    /// Its future was dropped: the completion, when it comes, frees the buffer.
    Abandoned,
}

struct State {
    /// Each operation's full context and slot.
    slots: Slab<(u64, Slot)>,
    /// Generation of the next context.
    generation: u16,
    /// Completions of operations the async layer did not post.
    raw: VecDeque<Completion>,
    raw_waker: Option<Waker>,
    /// Wakers of [`Dispatcher::progress`] tasks.
    progress: Vec<Waker>,
    /// Completions routed so far; operations refused with [`Error::Again`]
    /// wait for it to change.
    routed: u64,
    /// Wakers of operations waiting for capacity.
    capacity: Vec<Waker>,
    /// Counts what may have put completions in the queue without a drive
    /// seeing them: the descriptor firing (or the reactor's tick), a post
    /// or a cancel through the async layer.
    events: u64,
    /// `Some(events)` as it was when a poller found the queue empty and
    /// the reactor armed: while `events` still has that value, a waiting
    /// operation need not drive the queue again (nothing can have arrived).
    armed: Option<u64>,
    /// Times the descriptor fired (or the reactor ticked, or found it
    /// readable): what may have brought work only provider progress finds.
    fired: u64,
    /// `fired` as it was at the last drive that progressed the endpoints:
    /// while equal, a drive only takes what posting calls queued
    /// (decision 59).
    progressed: u64,
    /// The operation whose poll last armed the reactor: an event wakes it
    /// alone (it drives and routes, waking whose completions came), unless
    /// it is gone or the previous event was not served (decision 68).
    driver: Option<u64>,
    /// The spin window and its back-off (decisions 67, 70).
    spin: Spin,
    /// Drives that progressed the endpoints (counted as they start).
    progresses: u64,
    /// `progresses` as it was before the last `trywait` that armed the
    /// endpoints: while it differs, a progress took what that armed
    /// ([`Dispatcher::rearm`]).
    armed_at: u64,
}

/// Routes the completions of one completion queue to the futures of the
/// operations posted through it ([`super::AsyncEndpoint`]).
///
/// Whoever polls drives: a future that finds its operation unfinished polls
/// the queue, hands every completion to its operation's slot and wakes that
/// operation's future. When the queue has nothing, it checks
/// [`CompletionQueue::trywait`] and asks the [`Reactor`] to wake it when the
/// queue's descriptor becomes readable; that wakes the operation that armed
/// it last (it drives and routes), or every waiting future when that one is
/// gone or did not serve the previous event (decision 68). Completions of operations posted outside the
/// async layer (contexts without [`CONTEXT_TAG`]) queue for
/// [`next_completion`](Self::next_completion); they accumulate until taken.
pub struct Dispatcher {
    reactor: Box<dyn Reactor>,
    cq: CompletionQueue,
    state: Mutex<State>,
    /// Given to the reactor: wakes the driver, or every waiting future.
    fd_waker: Waker,
    /// Whether a spin window is set (`State::spin` non-zero): read without
    /// the lock on every park.
    spinning: AtomicBool,
}

/// Wakes a dispatcher's driver (or, failing one, every waiter) when its
/// queue's descriptor fires or the reactor ticks.
struct FdWake(Weak<Dispatcher>);

impl Wake for FdWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(d) = self.0.upgrade() else { return };
        // Collected under the lock, woken after it; the first few without
        // an allocation (an event usually wakes a handful).
        let mut first: [Option<Waker>; 8] = Default::default();
        let mut more = Vec::new();
        match d.lock() {
            Ok(mut st) => {
                let st = &mut *st;
                // The previous event served (a progress since), and its
                // driver still waiting: it alone drives this one.
                let served = st.fired == st.progressed;
                st.events = st.events.wrapping_add(1);
                st.fired = st.fired.wrapping_add(1);
                let driver = st.driver.take().filter(|_| served).and_then(|c| st.waiter(c));
                if driver.is_some() {
                    first[0] = driver;
                } else {
                    let ops = st.slots.iter_mut().filter_map(|(_, (_, s))| match s {
                        Slot::Waiting(w) => w.take(),
                        _ => None,
                    });
                    let others = st.raw_waker.take().into_iter().chain(st.progress.drain(..));
                    for (i, w) in ops.chain(others).chain(st.capacity.drain(..)).enumerate() {
                        match first.get_mut(i) {
                            Some(slot) => *slot = Some(w),
                            None => more.push(w),
                        }
                    }
                }
            }
            Err(_) => return,
        }
        first.into_iter().flatten().chain(more).for_each(Waker::wake);
    }
}

impl Dispatcher {
    /// A dispatcher for `cq`, woken by `reactor` (which watches `cq.fd()`).
    /// One per queue: two would take each other's completions.
    pub fn new(cq: CompletionQueue, reactor: impl Reactor) -> Arc<Dispatcher> {
        let spin = spin_from_env();
        Arc::new_cyclic(|me| Dispatcher {
            reactor: Box::new(reactor),
            cq,
            state: Mutex::new(State {
                slots: Slab::new(),
                generation: 0,
                raw: VecDeque::new(),
                raw_waker: None,
                progress: Vec::new(),
                routed: 0,
                capacity: Vec::new(),
                events: 0,
                armed: None,
                fired: 0,
                progressed: 0,
                driver: None,
                spin: Spin::new(spin),
                progresses: 0,
                armed_at: 0,
            }),
            fd_waker: Waker::from(Arc::new(FdWake(me.clone()))),
            spinning: AtomicBool::new(!spin.is_zero()),
        })
    }

    /// The completion queue it drives.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// Sets the spin window (default `XFER_AIO_SPIN_US`, else
    /// [`DEFAULT_SPIN`]): for this long after a completion was routed, an
    /// operation that finds nothing to do does not park on the queue's
    /// descriptor but yields to the runtime, woken again at once, and polls
    /// the endpoints when it runs next. It trades a CPU busy while waiting
    /// for the wake-up latency of a sleeping thread (decision 67). Spinning
    /// backs off for 20 ms when 4 of the last 16 spins did not pay (ran out
    /// of window, or the process was preempted meanwhile: a CPU shared with
    /// the peer; decision 70). Zero parks at once, always.
    pub fn set_spin(&self, window: Duration) {
        if let Ok(mut st) = self.lock() {
            st.spin.set(window);
            self.spinning.store(!window.is_zero(), Ordering::Relaxed);
        }
    }

    /// The spin window ([`set_spin`](Self::set_spin)).
    pub fn spin(&self) -> Duration {
        self.lock().map_or(Duration::ZERO, |st| st.spin.window())
    }

    /// Operations posted through it whose completion has not been taken or
    /// freed yet, including those whose future was dropped.
    pub fn in_flight(&self) -> usize {
        self.lock().map_or(0, |st| st.slots.len())
    }

    /// Of [`in_flight`](Self::in_flight), those whose future was dropped:
    /// their buffers are still the transport's, freed when their
    /// completion (done or cancelled) arrives.
    pub fn abandoned(&self) -> usize {
        self.lock().map_or(0, |st| {
            st.slots
                .iter()
                .filter(|(_, (_, s))| matches!(s, Slot::Abandoned))
                .count()
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| Error::Internal("async dispatcher lock poisoned by an earlier panic"))
    }

    /// Reserves a slot: the context to post the operation with, and the
    /// count of completions routed so far (taken before posting, so that
    /// an operation refused with [`Error::Again`] can wait for the next
    /// one, [`capacity`](Self::capacity)).
    pub(crate) fn reserve(&self) -> Result<(u64, u64)> {
        let mut st = self.lock()?;
        let entry = st.slots.vacant_entry();
        let key = entry.key() as u64;
        if key > KEY_MASK {
            return Err(Error::Again);
        }
        let context = CONTEXT_TAG | u64::from(st.generation) << 32 | key;
        st.slots.insert((context, Slot::Waiting(None)));
        st.generation = st.generation.wrapping_add(1);
        Ok((context, st.routed))
    }

    /// Records that the provider was called in a way that may have queued
    /// completions without the descriptor firing (a cancel), so the next
    /// waiting operation drives the queue. A post needs none: its
    /// operation's first poll, right after it, takes what it queued
    /// ([`poll_op`](Self::poll_op) with `posted`).
    pub(crate) fn stirred(&self) {
        if let Ok(mut st) = self.lock() {
            st.events = st.events.wrapping_add(1);
        }
    }

    /// Frees the slot of an operation the provider refused.
    pub(crate) fn release(&self, context: u64) {
        if let Ok(mut st) = self.lock() {
            if st.slot(context).is_some() {
                st.slots.remove(key(context));
            }
        }
    }

    /// Marks the operation's future gone. Returns whether it was still
    /// waiting (so a receive should be cancelled); a completion already
    /// there is dropped now, with its buffer.
    pub(crate) fn abandon(&self, context: u64) -> bool {
        let Ok(mut st) = self.lock() else { return false };
        let waiting = match st.slot(context) {
            Some(slot @ Slot::Waiting(_)) => {
                *slot = Slot::Abandoned;
                true
            }
            Some(Slot::Done(_)) => {
                st.slots.remove(key(context));
                false
            }
            _ => false,
        };
        // A future dropped while it spun leaves the others as a done one does.
        self.rearm_if_left_unarmed(st);
        waiting
    }

    /// Polls the queue and routes what it got, until the queue is empty (or
    /// its budget of rounds ran out); how many completions.
    ///
    /// Draining matters: completions left in the queue raise no descriptor
    /// event, and waiting operations do not drive a queue found empty since
    /// the last event (decision 39), so a burst larger than one round would
    /// otherwise wait for the next event. A queue still not empty after the
    /// budget wakes every waiter, as an event does, so one of them goes on.
    pub fn drive(&self) -> Result<usize> {
        if let Ok(mut st) = self.lock() {
            st.progresses += 1;
        }
        let n = self.drain(true).map(|(n, _)| n);
        if let Ok(st) = self.lock() {
            self.rearm_if_left_unarmed(st);
        }
        n
    }

    /// [`drive`](Self::drive), progressing the endpoints first only when
    /// `progress` (else taking just what is queued: no system call,
    /// decision 59). Only the first round progresses: later ones take what
    /// it left. Also tells whether it emptied the queue (else the budget
    /// ran out).
    fn drain(&self, progress: bool) -> Result<(usize, bool)> {
        let mut total = 0;
        for round in 0..BUDGET {
            let n = self.drive_once(progress && round == 0)?;
            total += n;
            if n < BATCH {
                return Ok((total, true));
            }
        }
        self.fd_waker.wake_by_ref();
        Ok((total, false))
    }

    /// One round of [`drain`](Self::drain): at most [`BATCH`] completions.
    fn drive_once(&self, progress: bool) -> Result<usize> {
        let mut batch = [Completion::EMPTY; BATCH];
        let n = match progress {
            true => self.cq.poll(&mut batch)?,
            false => self.cq.poll_queued(&mut batch)?,
        };
        if n == 0 {
            return Ok(0);
        }
        let mut wake: [Option<Waker>; BATCH + 1] = Default::default();
        let capacity = {
            let mut st = self.lock()?;
            for (c, w) in batch[..n].iter_mut().zip(&mut wake) {
                *w = st.route(std::mem::take(c));
            }
            if !st.raw.is_empty() {
                wake[BATCH] = st.raw_waker.take();
            }
            st.routed += n as u64;
            if self.spinning.load(Ordering::Relaxed) {
                st.spin.routed(Instant::now());
            }
            std::mem::take(&mut st.capacity)
        };
        wake.into_iter().flatten().chain(capacity).for_each(Waker::wake);
        Ok(n)
    }

    /// Polls for the completion of the operation posted with `context`:
    /// drives the queue, and when nothing is left to do registers the
    /// waker with the reactor. `posted`: the first poll after posting,
    /// which always takes what the posting call queued (for any operation).
    pub(crate) fn poll_op(&self, context: u64, posted: bool, cx: &mut Context<'_>) -> Poll<Result<Completion>> {
        self.poll_with(cx, !posted, Some(context), |st, waker| match st.slot(context) {
            Some(Slot::Done(_)) => st.take_done(context).map(Ok),
            Some(Slot::Waiting(w)) => {
                if !w.as_ref().is_some_and(|w| w.will_wake(waker)) {
                    *w = Some(waker.clone());
                }
                None
            }
            _ => Some(Err(Error::Internal("async operation polled after it ended"))),
        })
    }

    /// Takes the completion of the operation posted with `context` if the
    /// posting call (or an earlier one) queued it: what its first poll
    /// takes, without progressing the endpoints, keeping a waker or
    /// parking. `None`: not complete yet, and nothing will wake for it
    /// until it is polled.
    pub(crate) fn take_queued(&self, context: u64) -> Option<Result<Completion>> {
        if let Err(e) = self.drain(false) {
            return Some(Err(e));
        }
        self.lock().ok()?.take_done(context).map(Ok)
    }

    /// Polls for the next completion of an operation posted outside the
    /// async layer (context without [`CONTEXT_TAG`]): remote writes with
    /// data, raw posts on endpoints bound to the same queue.
    pub fn poll_completion(&self, cx: &mut Context<'_>) -> Poll<Result<Completion>> {
        self.poll_with(cx, false, None, |st, waker| match st.raw.pop_front() {
            Some(c) => Some(Ok(c)),
            None => {
                st.raw_waker = Some(waker.clone());
                None
            }
        })
    }

    /// The next completion [`poll_completion`](Self::poll_completion) gives.
    /// Cancel-safe: a completion is only taken when this returns.
    pub async fn next_completion(&self) -> Result<Completion> {
        std::future::poll_fn(|cx| self.poll_completion(cx)).await
    }

    /// Waits (driving) until a completion was routed after `seen` was read:
    /// an endpoint at its `max_outstanding` (or a peer at its
    /// `max_outstanding_per_peer`) may then have room.
    pub(crate) async fn capacity(&self, seen: u64) -> Result<()> {
        std::future::poll_fn(|cx| self.poll_capacity(seen, cx)).await
    }

    /// [`capacity`](Self::capacity) as a poll.
    pub(crate) fn poll_capacity(&self, seen: u64, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_with(cx, false, None, |st, waker| {
            if st.routed != seen {
                return Some(Ok(()));
            }
            if !st.capacity.iter().any(|w| w.will_wake(waker)) {
                st.capacity.push(waker.clone());
            }
            None
        })
    }

    /// Drives the queue whenever its descriptor fires, until the queue
    /// fails (the error). For a side that must progress with no operation
    /// of its own waiting: an RMA target on a provider that serves RMA in
    /// software (TCP), a sender whose send futures were dropped, a
    /// connection to be accepted. Spawn it as a task; it is cancel-safe.
    pub async fn progress(&self) -> Error {
        let r = std::future::poll_fn(|cx| {
            self.poll_with(cx, false, None, |st, waker| {
                if !st.progress.iter().any(|w| w.will_wake(waker)) {
                    st.progress.push(waker.clone());
                }
                None::<Result<()>>
            })
        })
        .await;
        r.err().unwrap_or(Error::Internal("progress ended without an error"))
    }

    /// The drive loop shared by operations and the completion stream: `take`
    /// returns the result, or registers the waker and returns `None`.
    ///
    /// With `may_skip` (operation futures), a poller that finds its result
    /// not there does not drive when another poller found the queue empty
    /// and armed the reactor since the last event that could have queued
    /// a completion (`State::armed`): that event wakes every waiter, so
    /// this one is woken too. One descriptor event then costs one or two
    /// drives, not one per waiting future (each drive and `trywait` makes
    /// the provider progress: a `recv` per TCP connection). The raw
    /// completion stream, capacity waits and progress tasks always drive,
    /// so completions of raw posts (which the descriptor does not signal
    /// when they complete inside the posting call) are found.
    fn poll_with<T>(
        &self,
        cx: &mut Context<'_>,
        may_skip: bool,
        driver: Option<u64>,
        mut take: impl FnMut(&mut State, &Waker) -> Option<Result<T>>,
    ) -> Poll<Result<T>> {
        // This poll emptied the queue and nothing progressed since: only
        // another operation's post can have queued anything, and that
        // operation's first poll takes it.
        let mut emptied = false;
        for _ in 0..BUDGET {
            let (events, progress, gen) = match self.lock() {
                Ok(mut st) => {
                    if let Some(r) = take(&mut st, cx.waker()) {
                        self.rearm_if_left_unarmed(st);
                        return Poll::Ready(r);
                    }
                    if may_skip && st.armed == Some(st.events) {
                        return Poll::Pending;
                    }
                    // Without a descriptor event since the last progress,
                    // only posting calls can have added completions, and
                    // they are queued already; before anyone parks,
                    // `trywait` settles what must not wait for a sleeper
                    // and the descriptor reports the rest.
                    let progress = st.fired != st.progressed;
                    st.progressed = st.fired;
                    if progress {
                        st.progresses += 1;
                    }
                    (st.events, progress, st.progresses)
                }
                Err(e) => return Poll::Ready(Err(e)),
            };
            if progress {
                self.consume_readiness();
            }
            if progress || !emptied {
                match self.drain(progress) {
                    Ok((0, _)) => {}
                    Ok((_, all)) => {
                        emptied = all;
                        continue;
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            if self.keep_spinning() {
                self.reactor.yield_soon(cx);
                return Poll::Pending;
            }
            match self.cq.trywait() {
                Ok(()) => {}
                Err(Error::Again) => {
                    // Preparing to sleep queued completions.
                    emptied = false;
                    continue;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
            match self.reactor.poll_readable(&mut Context::from_waker(&self.fd_waker)) {
                Poll::Pending => {
                    // Empty when `events` was read, and armed: until the next
                    // event, waiting operations need not drive.
                    if let Ok(mut st) = self.lock() {
                        st.armed = Some(events);
                        st.driver = driver;
                        st.armed_at = gen;
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Ok(())) => {
                    // Readable already: what made it so needs progress.
                    if let Ok(mut st) = self.lock() {
                        st.fired = st.fired.wrapping_add(1);
                    }
                    continue;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Dispatcher {
    /// Whether a poller that found nothing should yield and poll again
    /// rather than park: inside the spin window after the last routed
    /// completion. If so, its next poll progresses the endpoints (as after
    /// a descriptor event) and other waiters do not skip driving.
    fn keep_spinning(&self) -> bool {
        if !self.spinning.load(Ordering::Relaxed) {
            return false;
        }
        let Ok(mut st) = self.lock() else { return false };
        let within = st.spin.keep(Instant::now());
        if within {
            st.fired = st.fired.wrapping_add(1);
            st.events = st.events.wrapping_add(1);
        }
        within
    }

    /// Arms the endpoints again for the futures still parked on the
    /// descriptor, for a poller that leaves without parking (done, or
    /// dropped) after a drive, its own or a spinning one's, progressed
    /// them. Progress takes what a sleeper's `trywait` armed (shared
    /// memory's sleeping flags, a verbs CQ's notification, TCP connections
    /// kept out of its epoll set while hot): a frame that arrives
    /// afterwards would raise no event, and the parked futures, their
    /// driver included, would sleep on with it unread. The reactor is
    /// polled as a parking future polls it, so its tick timer (which fired
    /// for that progress, perhaps) runs again too. When either finds work
    /// already there, the driver is woken to take it. `gen` is the count
    /// of progresses read before arming.
    fn rearm(&self, gen: u64) {
        let armed = self.cq.trywait().is_ok()
            && self
                .reactor
                .poll_readable(&mut Context::from_waker(&self.fd_waker))
                .is_pending();
        match armed {
            true => {
                if let Ok(mut st) = self.lock() {
                    st.armed_at = gen;
                }
            }
            false => self.fd_waker.wake_by_ref(),
        }
    }

    /// [`rearm`](Self::rearm) when a progress since the last arming left
    /// the futures still waiting unarmed; `st` is the state's lock, given
    /// up first (arming takes it again).
    fn rearm_if_left_unarmed(&self, st: MutexGuard<'_, State>) {
        let (unarmed, gen) = (st.unarmed(), st.progresses);
        drop(st);
        if unarmed {
            self.rearm(gen);
        }
    }

    /// Takes the reactor's readiness that the progress about to be made
    /// covers, so that the next [`Reactor::poll_readable`] reports only
    /// what arrives after it. Without this, the event that woke the
    /// waiters was reported once more after they had progressed, and cost
    /// every wake-up a second progress: a `recv` returning `EAGAIN` per
    /// message on TCP (decision 66). Nothing is lost: whatever arrives once
    /// the readiness is taken raises a new event.
    fn consume_readiness(&self) {
        // Pending registers the queue's own waker, as parking would.
        self.reactor.take_readable(&mut Context::from_waker(&self.fd_waker));
    }
}

impl State {
    /// Hands `c` to its operation's slot (returning the waker to wake) or
    /// to the raw queue.
    fn route(&mut self, c: Completion) -> Option<Waker> {
        if c.context & !ID_MASK != CONTEXT_TAG {
            self.raw.push_back(c);
            return None;
        }
        match self.slot(c.context) {
            Some(slot @ Slot::Waiting(_)) => {
                let Slot::Waiting(w) = std::mem::replace(slot, Slot::Abandoned) else {
                    return None;
                };
                *slot = Slot::Done(c);
                w
            }
            Some(Slot::Abandoned) => {
                // The transport is done with the buffer: free it now.
                self.slots.remove(key(c.context));
                None
            }
            Some(Slot::Done(_)) | None => {
                xfer_core::error_limited!(
                    context = c.context,
                    "completion for no waiting async operation; dropped"
                );
                None
            }
        }
    }
}

impl State {
    /// Whether anyone else waits on the queue: an operation still in flight
    /// (its slot: a dropped one's completion must still be taken), the raw
    /// completion stream, a progress task or a capacity wait.
    fn others_wait(&self) -> bool {
        !self.slots.is_empty() || self.raw_waker.is_some() || !self.progress.is_empty() || !self.capacity.is_empty()
    }

    /// A progress since the last arming, with others waiting: whoever
    /// leaves now must arm the endpoints again.
    fn unarmed(&self) -> bool {
        self.progresses != self.armed_at && self.others_wait()
    }

    /// The completion of the operation posted with `context`, taken with
    /// its slot, if it is there.
    fn take_done(&mut self, context: u64) -> Option<Completion> {
        if !matches!(self.slot(context), Some(Slot::Done(_))) {
            return None;
        }
        match self.slots.remove(key(context)).1 {
            Slot::Done(c) => Some(c),
            _ => None,
        }
    }

    /// The waker of the operation posted with `context`, taken, if it is
    /// still waiting and has polled.
    fn waiter(&mut self, context: u64) -> Option<Waker> {
        match self.slot(context) {
            Some(Slot::Waiting(w)) => w.take(),
            _ => None,
        }
    }

    /// The slot of the operation posted with `context`, if it still has one.
    fn slot(&mut self, context: u64) -> Option<&mut Slot> {
        match self.slots.get_mut(key(context)) {
            Some((c, slot)) if *c == context => Some(slot),
            _ => None,
        }
    }
}

/// The spin window `XFER_AIO_SPIN_US` asks for, in microseconds, parsed as
/// every `XFER_*` setting is ([`crate::attr::env_value`]); absent or
/// unparsable (logged): [`DEFAULT_SPIN`].
fn spin_from_env() -> Duration {
    xfer_core::unstable::attr::env_value::<u64>("XFER_AIO_SPIN_US").map_or(DEFAULT_SPIN, Duration::from_micros)
}

fn key(context: u64) -> usize {
    (context & KEY_MASK) as usize
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}
