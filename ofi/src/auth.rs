//! libfabric's authorization keys as xfer's job key (docs/OFI.md,
//! "Authorization keys"). An `auth_key` in `domain_attr` is the default key
//! of the domain's endpoints, one in `ep_attr` the endpoint's own; either
//! becomes the endpoint's `EndpointAttr::job_key`, which every xfer
//! provider enforces (tcp, shm and shm+tcp in the RDM engine's handshake,
//! verbs in rdma_cm's private data): a peer must prove it holds the same key (an HMAC over
//! a challenge; the key never travels) or is refused before anything it
//! sent is delivered. Without one, `XFER_JOB_KEY` applies, as every
//! `XFER_*` setting does.

/// Longest key accepted (`auth_key_size`).
pub const MAX_AUTH_KEY: usize = 1024;

/// The key of `n` bytes at `p`: `None` when `n` is 0; refused when `p` is
/// null or the key is longer than [`MAX_AUTH_KEY`].
///
/// # Safety
/// `p` is null or valid for `n` bytes.
pub unsafe fn read(p: *const u8, n: usize) -> Result<Option<Vec<u8>>, &'static str> {
    match (p.is_null(), n) {
        (_, 0) => Ok(None),
        (true, _) => Err("an auth_key_size without its auth_key"),
        (false, n) if n > MAX_AUTH_KEY => Err("an auth_key longer than 1024 bytes"),
        // SAFETY: the caller's key holds n bytes.
        (false, n) => Ok(Some(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())),
    }
}
