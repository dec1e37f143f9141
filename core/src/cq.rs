//! The completion queue handle: poll, blocking wait, and a descriptor for
//! event loops.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::CqAttr;
use crate::completion::Completion;
use crate::domain::Shared;
use crate::error::{Error, Result};
use crate::sys::{Epoll, EMPTY_EVENT, READABLE};

/// Longest single sleep of [`CompletionQueue::wait`], so that provider
/// timers (connection timeouts) are checked even when no descriptor fires.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// Where operations report their completions, successful or not. Polling
/// it drives progress of the endpoints bound to it. Cloning gives another
/// handle to the same queue.
#[derive(Clone)]
pub struct CompletionQueue(Arc<Handle>);

struct Handle {
    shared: Arc<Shared>,
    key: usize,
    /// Holds every bound endpoint's wait descriptor; readable when any is.
    epoll: Epoll,
    /// Whether the descriptors are in `epoll`: only once a program asks for
    /// blocking (`wait`, `trywait`, `fd`), so busy-polling programs do not
    /// pay a nested epoll wake-up per arriving message. Written under the
    /// domain lock.
    armed: AtomicBool,
}

impl CompletionQueue {
    pub(crate) fn open(shared: Arc<Shared>, attr: &CqAttr) -> Result<CompletionQueue> {
        let epoll = Epoll::new()?;
        let mut st = shared.lock()?;
        let key = st.cqs.insert(VecDeque::with_capacity(attr.size));
        let bound = st.bound.insert(Vec::new());
        debug_assert_eq!(key, bound, "cqs and bound slabs move in lockstep");
        drop(st);
        Ok(CompletionQueue(Arc::new(Handle {
            shared,
            key,
            epoll,
            armed: AtomicBool::new(false),
        })))
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.0.shared
    }

    pub(crate) fn key(&self) -> usize {
        self.0.key
    }

    /// Adds a newly bound endpoint's descriptor if the queue is armed;
    /// called with the domain lock held.
    pub(crate) fn watch(&self, fd: RawFd) -> Result<()> {
        if self.0.armed.load(Ordering::Acquire) {
            self.0.epoll.add(fd, READABLE, fd as u64)?;
        }
        Ok(())
    }

    /// Puts every bound endpoint's descriptor into the queue's epoll set,
    /// once, so that blocking on it sees their activity.
    fn arm(&self) -> Result<()> {
        if self.0.armed.load(Ordering::Acquire) {
            return Ok(());
        }
        let st = self.0.shared.lock()?;
        if self.0.armed.load(Ordering::Acquire) {
            return Ok(());
        }
        for &ep in &st.bound[self.0.key] {
            let fd = st.eps[ep].prov.wait_fd();
            self.0.epoll.add(fd, READABLE, fd as u64)?;
        }
        self.0.armed.store(true, Ordering::Release);
        Ok(())
    }

    pub(crate) fn unwatch(&self, fd: RawFd) {
        if !self.0.armed.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.0.epoll.delete(fd) {
            tracing::debug!(fd, error = %e, "removing endpoint descriptor from completion queue");
        }
    }

    /// Moves up to `out.len()` completions into `out`, those already queued
    /// first, then what progressing the bound endpoints completes (beyond
    /// `out`'s room, that stays queued for the next call); returns how many.
    /// Never blocks.
    ///
    /// Always inlined into the caller, as is the progress loop under it: a
    /// frame of ours live across the provider's `recv` would cost a
    /// mispredicted return on every poll (decision 72).
    #[inline(always)]
    pub fn poll(&self, out: &mut [Completion]) -> Result<usize> {
        let mut st = self.0.shared.lock()?;
        // What earlier calls queued comes first; what progress completes now
        // goes straight into the rest of `out` (decision 71).
        let mut filled = take_queued(&mut st.cqs[self.0.key], out);
        st.progress_cq(self.0.key, out, &mut filled);
        Ok(filled)
    }

    /// Moves up to `out.len()` completions already in the queue into `out`
    /// without progressing the bound endpoints: what posting calls (and
    /// earlier progress) produced. No system call; for event-driven callers
    /// that progress only when the descriptor fires (the async layer).
    pub fn poll_queued(&self, out: &mut [Completion]) -> Result<usize> {
        let mut st = self.0.shared.lock()?;
        Ok(take_queued(&mut st.cqs[self.0.key], out))
    }

    /// Like [`poll`](Self::poll) but blocks until at least one completion
    /// is ready or `timeout` passes (`None`: forever), then fails with
    /// [`Error::TimedOut`] (`fi_cq_sread`).
    pub fn wait(&self, out: &mut [Completion], timeout: Option<Duration>) -> Result<usize> {
        if out.is_empty() {
            return Err(Error::InvalidArgument("wait needs room for at least one completion"));
        }
        self.arm()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            if !self.0.shared.lock()?.ready_to_block(self.0.key) {
                continue; // completions arrived while arming
            }
            let sleep = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(MAX_SLEEP),
                    _ => return Err(Error::TimedOut),
                },
                None => MAX_SLEEP,
            };
            let ms = sleep.as_millis().max(1) as i32;
            self.0.epoll.wait(&mut [EMPTY_EVENT], ms)?;
        }
    }

    /// Tells whether it is safe to block on [`fd`](Self::fd): `Ok(())` when
    /// no completion is ready, [`Error::Again`] when one is (poll instead).
    /// Mirrors `fi_trywait`. Each bound endpoint first prepares to sleep
    /// (`EndpointProvider::prepare_wait`: a verbs CQ is armed and polled,
    /// TCP writes what a burst held back, puts every connection in its
    /// epoll set and serves those epoll reports ready), without the
    /// speculative reads of a progress call (decisions 59, 66): afterwards
    /// only new activity makes the descriptor readable, so an edge-triggered
    /// waiter misses nothing. [`poll`](Self::poll) when it fires.
    pub fn trywait(&self) -> Result<()> {
        self.arm()?;
        let mut st = self.0.shared.lock()?;
        if st.ready_to_block(self.0.key) {
            Ok(())
        } else {
            Err(Error::Again)
        }
    }

    /// A descriptor that becomes readable when a bound endpoint has work;
    /// for event loops and async runtimes. Call [`trywait`](Self::trywait)
    /// before blocking on it, and [`poll`](Self::poll) when it fires.
    pub fn fd(&self) -> RawFd {
        if let Err(e) = self.arm() {
            crate::error_limited!(error = %e, "arming the completion queue's descriptor; blocking on it may miss events");
        }
        self.0.epoll.as_raw_fd()
    }
}

/// Moves up to `out.len()` completions from the front of `ring` into `out`.
#[inline]
pub(crate) fn take_queued(ring: &mut VecDeque<Completion>, out: &mut [Completion]) -> usize {
    let n = ring.len().min(out.len());
    for slot in &mut out[..n] {
        if let Some(c) = ring.pop_front() {
            *slot = c;
        }
    }
    n
}

impl Drop for Handle {
    fn drop(&mut self) {
        match self.shared.lock() {
            Ok(mut st) => {
                st.cqs.remove(self.key);
                st.bound.remove(self.key);
            }
            Err(e) => {
                crate::warn_limited!(error = %e, "completion queue dropped where its domain cannot be entered; kept until the domain closes")
            }
        }
    }
}
