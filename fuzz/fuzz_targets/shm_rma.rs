//! The shared-memory RMA engine (`xfer_shm::rma`, its header parser
//! `rma::wire::Header::parse` and the target's key, bounds and access
//! checks in `xfer_shm::region`) fed frames a hostile peer wrote into the
//! ring, through `xfer_shm::fuzzing::rma_frames`: the engine has two regions
//! of its own and four operations of its own in flight with that peer.
//!
//! Input: records of `[payload length (u16 LE), 48 header bytes, payload]`
//! (`xfer_shm::fuzzing::rma_input`). Properties: no panic and no access
//! outside the ring or the regions (AddressSanitizer, and guard bytes
//! around each region checked after the run); no operation's progress
//! passes its length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xfer_shm::fuzzing::{rma_frames, rma_input};

fuzz_target!(|data: &[u8]| {
    rma_frames(&rma_input(data));
});
