//! What a runtime provides to the async layer: readiness of one descriptor.

use std::io;
use std::task::{Context, Poll};

/// Watches a completion queue's descriptor ([`crate::CompletionQueue::fd`])
/// for a [`Dispatcher`](super::Dispatcher); one implementation per runtime
/// ([`super::tokio::TokioReactor`] for tokio).
///
/// The dispatcher calls [`poll_readable`](Self::poll_readable) with its own
/// waker only: before it progresses after an event (to take the readiness
/// that progress covers) and after [`crate::CompletionQueue::trywait`] said
/// nothing is ready.
pub trait Reactor: Send + Sync + 'static {
    /// `Ready(Ok(()))` when the descriptor became readable since the last
    /// `Ready` (clearing that readiness: the dispatcher polls the queue next),
    /// or when the dispatcher should poll anyway (a periodic tick, so that
    /// provider timers such as connect timeouts fire); otherwise `Pending`,
    /// with `cx`'s waker woken at the next such event.
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Takes the descriptor's readiness, if it is readable, without
    /// waiting for it: the dispatcher is about to poll the queue for what
    /// made it so. The default is [`poll_readable`](Self::poll_readable)
    /// with its result dropped; a reactor whose `poll_readable` also polls
    /// a timer may skip that here.
    fn take_readable(&self, cx: &mut Context<'_>) {
        let _ = self.poll_readable(cx);
    }

    /// Has the task of `cx` polled again soon, after the runtime had a
    /// chance to run its other ready tasks and check its I/O: how an
    /// operation spinning inside the dispatcher's spin window yields
    /// ([`Dispatcher::set_spin`](super::Dispatcher::set_spin)). The default
    /// wakes the task at once, which on a runtime with a FIFO run queue
    /// lets every other ready task run first.
    fn yield_soon(&self, cx: &mut Context<'_>) {
        cx.waker().wake_by_ref();
    }
}
