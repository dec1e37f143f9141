//! Shared by the async-layer tests (tests/aio.rs, tests/teardown.rs): an
//! allocator that poisons freed memory, so that a transport writing into a
//! buffer after it was freed corrupts a later allocation's pattern (and one
//! reading it sends 0xdd), and a one-shot poll of a future.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Fills every freed block with 0xdd before returning it. A test binary
/// installs it with `#[global_allocator] static ALLOC: Poison = Poison;`.
pub struct Poison;

// SAFETY: forwards to `System`; the fill writes only the block being freed,
// which the caller owns (`layout.size()` bytes at `ptr`).
unsafe impl GlobalAlloc for Poison {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` is a live block of `layout.size()` bytes being freed.
        unsafe {
            std::ptr::write_bytes(ptr, 0xdd, layout.size());
            System.dealloc(ptr, layout)
        }
    }
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// A waker that does nothing, for polling by hand.
pub fn noop_waker() -> Waker {
    Waker::from(Arc::new(Noop))
}

/// Polls `f` once (posting its operation), with a waker that does nothing.
pub fn poll_once<F: Future>(f: &mut Pin<Box<F>>) -> Poll<F::Output> {
    f.as_mut().poll(&mut Context::from_waker(&noop_waker()))
}
