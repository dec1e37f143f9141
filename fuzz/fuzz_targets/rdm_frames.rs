//! The RDM engine (`xfer_core::rdm::engine`: its header parser, every
//! frame kind's handling, credit, rendezvous and RMA target checks) fed a
//! hostile peer's frames over the in-memory transport, through
//! `xfer_core::unstable::rdm::engine::fuzzing::run`: the endpoint has
//! receives posted, a rendezvous send, an acknowledged send and an RMA read
//! waiting on that peer, and a registered region between guard bytes (an
//! RMA frame naming key 1 gets the region's key, a small address its base
//! added).
//!
//! Input: records of `[56 header bytes, payload length (u16 LE), payload]`
//! (`fuzzing::frames`). Properties: no panic; nothing written outside the
//! region (AddressSanitizer, and the guard bytes checked after the run);
//! the endpoint closes cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xfer_core::unstable::rdm::engine::fuzzing::{frames, run};

fuzz_target!(|data: &[u8]| {
    run(&frames(data));
});
