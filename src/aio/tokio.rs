//! The tokio driver: the completion queue's descriptor in tokio's reactor.
//!
//! [`dispatcher`] is all a tokio program needs; a side with nothing of its
//! own to await (an RMA target on TCP) spawns the dispatcher's progress:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> xfer::Result<()> {
//! let domain = xfer::open_default()?;
//! let cq = domain.cq(&xfer::CqAttr::from_env())?;
//! let dispatcher = xfer::aio::tokio::dispatcher(&cq)?;
//! let progress = tokio::spawn({
//!     let d = std::sync::Arc::clone(&dispatcher);
//!     async move { d.progress().await }
//! });
//! // ... endpoints bound to `cq` are served while the task runs.
//! progress.abort();
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::time::{Instant, Sleep};

use super::{Dispatcher, Reactor};
use crate::{CompletionQueue, Error, Result};

/// How often waiting futures poll the queue even when its descriptor is
/// quiet, so that provider timers (connect timeouts) fire.
pub const TICK: Duration = Duration::from_millis(50);

/// A [`Reactor`] on tokio: [`AsyncFd`] on the queue's descriptor, and a
/// [`TICK`] timer.
pub struct TokioReactor {
    fd: AsyncFd<CqFd>,
    tick: Mutex<Pin<Box<Sleep>>>,
}

impl TokioReactor {
    /// Registers `cq.fd()` with the current tokio runtime, which must have
    /// its I/O and time drivers enabled (`enable_all`, as `#[tokio::main]`).
    pub fn new(cq: &CompletionQueue) -> Result<TokioReactor> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument("no tokio runtime: call from within one"));
        }
        let inner = CqFd {
            fd: cq.fd(),
            _cq: cq.clone(),
        };
        // SAFETY: `CqFd` holds a handle to the queue, which keeps its epoll
        // descriptor open for as long as the `AsyncFd` owns it, and always
        // returns that same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }.map_err(|e| e.into_parts().1)?;
        Ok(TokioReactor {
            fd,
            tick: Mutex::new(Box::pin(tokio::time::sleep(TICK))),
        })
    }
}

/// The queue's descriptor, kept open by the handle beside it.
struct CqFd {
    fd: RawFd,
    _cq: CompletionQueue,
}

impl AsRawFd for CqFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Reactor for TokioReactor {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.fd.poll_read_ready(cx) {
            Poll::Ready(Ok(mut ready)) => {
                ready.clear_ready();
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        let Ok(mut tick) = self.tick.lock() else {
            return Poll::Ready(Err(io::Error::other("tick timer lock poisoned")));
        };
        if tick.as_mut().poll(cx).is_ready() {
            tick.as_mut().reset(Instant::now() + TICK);
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }

    /// The descriptor's readiness only; the tick timer waits for the
    /// next `poll_readable`.
    fn take_readable(&self, cx: &mut Context<'_>) {
        if let Poll::Ready(Ok(mut ready)) = self.fd.poll_read_ready(cx) {
            ready.clear_ready();
        }
    }

    /// Through `tokio::task::yield_now`: tokio runs the task again after it
    /// has polled its I/O driver and the `block_on` future (a plain wake-up
    /// would leave the latter waiting for 61 other task polls; decision 67).
    fn yield_soon(&self, cx: &mut Context<'_>) {
        let mut yielded = std::pin::pin!(tokio::task::yield_now());
        if yielded.as_mut().poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }
}

/// A [`Dispatcher`] for `cq` on the current tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> xfer::Result<()> {
/// use xfer::aio::{self, AsyncEndpoint};
///
/// let domain = xfer::open_default()?;
/// let cq = domain.cq(&xfer::CqAttr::from_env())?;
/// let av = domain.av()?;
/// let ep = domain.endpoint(&cq, &av, &xfer::EndpointAttr::from_env())?;
/// let ep = AsyncEndpoint::new(ep, aio::tokio::dispatcher(&cq)?)?;
///
/// let me = av.insert(ep.endpoint().name().as_bytes())?;
/// let (recv, send) = tokio::join!(ep.trecv(xfer::PeerAddr::UNSPEC, 7, 0, vec![0; 5]), ep.tsend(me, 7, b"hello".to_vec()));
/// assert_eq!(send.0?, 5);
/// let (got, buf) = recv;
/// assert_eq!(&buf[..got?.len], b"hello");
/// # Ok(())
/// # }
/// ```
pub fn dispatcher(cq: &CompletionQueue) -> Result<Arc<Dispatcher>> {
    Ok(Dispatcher::new(cq.clone(), TokioReactor::new(cq)?))
}
