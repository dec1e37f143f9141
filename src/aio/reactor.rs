//! What a runtime provides to the async layer: readiness of one descriptor.

use std::io;
use std::task::{Context, Poll};

/// Watches a completion queue's descriptor ([`crate::CompletionQueue::fd`])
/// for a [`Dispatcher`](super::Dispatcher); one implementation per runtime
/// ([`super::tokio::TokioReactor`] for tokio).
///
/// The dispatcher calls it only after [`crate::CompletionQueue::trywait`]
/// said nothing is ready, always with the same waker.
pub trait Reactor: Send + Sync + 'static {
    /// `Ready(Ok(()))` when the descriptor became readable since the last
    /// `Ready` (clearing that readiness: the dispatcher polls the queue next),
    /// or when the dispatcher should poll anyway (a periodic tick, so that
    /// provider timers such as connect timeouts fire); otherwise `Pending`,
    /// with `cx`'s waker woken at the next such event.
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}
