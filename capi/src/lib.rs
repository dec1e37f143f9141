//! xfer-capi: the C ABI of xfer, built as `libxfer.so` and `libxfer.a`, with
//! its header `include/xfer.h` generated from this crate by cbindgen
//! (`capi/tests/header.rs` fails when the committed header is stale).
//!
//! A C program builds with `cc prog.c -Iinclude -Ltarget/release -lxfer`.
//!
//! # Rules the whole ABI follows
//!
//! - **Returns.** Every entry point returns an `int`: 0 (or, for polling, a
//!   count) on success, or a negative `XFER_E*` code (minus libfabric's
//!   `FI_E*` value). `xfer_strerror` gives the message.
//! - **Handles** are opaque pointers that are never dereferenced: they encode
//!   a slot of a process-wide table ([`handle`]). `NULL`, closed, foreign
//!   and wrong-kind handles fail with `XFER_EBADF`; closing twice too.
//! - **Closing order** is libfabric's: closing a domain, CQ or AV that an
//!   open handle depends on fails with `XFER_EBUSY`.
//! - **No panic crosses the boundary**: each entry point runs inside
//!   `catch_unwind` and reports a caught panic as `XFER_EIO`.
//! - **Buffers** given to `xfer_ep_send`/`recv`/... are not copied: they must
//!   stay valid and untouched until the operation's completion is polled
//!   (libfabric's contract), or until its endpoint is closed. Inject calls
//!   copy and return at once.
//! - **Registered memory** (`xfer_mr_reg`) stays the caller's and must stay
//!   valid until `xfer_mr_close` returns; peers reach it by RMA whenever the
//!   domain makes progress. Remote keys (`xfer_rkey_t`) are plain structs
//!   owned by the caller, not handles.
//! - **Threads.** Every call may be made from any thread. All objects opened
//!   from one domain share that domain's lock, held for the duration of each
//!   call (but not while `xfer_cq_wait` sleeps); for parallelism open one
//!   domain per thread. Closing a handle while another thread is still using
//!   it is a program error that the library survives: the racing call either
//!   fails with `XFER_EBADF` or completes against the object, which is
//!   destroyed when the last call using it returns.
//! - **Logging** goes through `tracing` to stderr, filtered by `XFER_LOG`
//!   (default `warn`), installed at the first `xfer_domain_open` unless the
//!   process already has a subscriber.
#![deny(missing_docs)]
#![allow(non_camel_case_types)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the xfer C ABI encodes handles in 64-bit pointers");

// Declared in the order the header presents them.
pub mod atomic;
pub mod av;
pub mod cq;
pub mod domain;
pub mod domain_attr;
pub mod ep;
pub mod error;
pub mod event;
mod handle;
pub mod iov;
pub mod mr;
pub mod region;
pub mod rma;

use std::ffi::c_void;

/// A peer's handle in an address vector (`fi_addr_t`).
pub type xfer_addr_t = u64;

/// No particular peer: an any-source receive, or a completion whose sender is
/// not in the address vector (`FI_ADDR_UNSPEC`).
pub const XFER_ADDR_UNSPEC: xfer_addr_t = u64::MAX;

/// The longest endpoint name any provider produces, in bytes.
pub const XFER_NAME_MAX: usize = 64;

/// Turns a C context pointer into the Rust API's `u64` context.
pub(crate) fn context_in(ctx: *mut c_void) -> u64 {
    ctx as usize as u64
}

/// Turns the Rust API's `u64` context back into the C pointer it came from.
pub(crate) fn context_out(ctx: u64) -> *mut c_void {
    ctx as usize as *mut c_void
}

#[cfg(test)]
mod tests {
    #[test]
    fn name_limit_matches_the_rust_api() {
        assert_eq!(super::XFER_NAME_MAX, xfer_facade::Address::MAX_LEN);
        assert_eq!(super::XFER_ADDR_UNSPEC, xfer_facade::PeerAddr::UNSPEC.0);
    }
}
