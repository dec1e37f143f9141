//! `fi_trecvmsg` with `FI_PEEK`, `FI_CLAIM` and `FI_DISCARD` (fi_tagged(3)),
//! mapped onto xfer's [`Endpoint::peek`], [`Endpoint::claim`] and
//! [`Endpoint::post_claimed`]: Open MPI's ofi MTL probes with them
//! (`MPI_Iprobe`: `FI_PEEK`; `MPI_Improbe`: `FI_PEEK | FI_CLAIM`, then
//! `MPI_Imrecv`: `FI_CLAIM`).
//!
//! A peek's answer is a completion on the receive CQ, as libfabric defines
//! it: success (`FI_TAGGED | FI_RECV`, the message's length, tag, data and
//! source) when a message matched, an error entry `FI_ENOMSG` when none
//! did. A claim is kept by the peek's context, which the claiming receive
//! passes again. A discarded message is received into an empty buffer with
//! the [`discard_context`], whose completion is dropped by the router
//! (`EpCore::progress`); the discard itself reports a completion of length 0
//! at once, as ofi_rxm does.
//!
//! [`Endpoint::peek`]: xfer_facade::Endpoint::peek
//! [`Endpoint::claim`]: xfer_facade::Endpoint::claim
//! [`Endpoint::post_claimed`]: xfer_facade::Endpoint::post_claimed

use std::ffi::c_void;

use xfer_facade::{Buffer, Claim, Peeked};

use crate::cq::Entry;
use crate::entry::{self, lock, scode};
use crate::ep::{Enabled, EpCore};
use crate::fi;

/// The flags handled here.
pub(crate) const PROBE_FLAGS: u64 = fi::FI_PEEK | fi::FI_CLAIM | fi::FI_DISCARD;

static DISCARD_MARK: u8 = 0;

/// The context of the receives that drop discarded messages: the address of
/// a static of ours, which no application context can equal.
pub(crate) fn discard_context() -> u64 {
    std::ptr::addr_of!(DISCARD_MARK) as usize as u64
}

/// A tagged receive with `FI_PEEK`, `FI_CLAIM` or `FI_DISCARD` in `flags`.
pub(crate) struct Probe {
    pub(crate) src: fi::fi_addr_t,
    pub(crate) tag: u64,
    pub(crate) ignore: u64,
    /// The buffer of a claiming receive (`FI_CLAIM` without `FI_PEEK`).
    pub(crate) buf: *mut c_void,
    pub(crate) len: usize,
    /// The buffer's `fi_mr_desc` (used under `FI_MR_LOCAL`), or null.
    pub(crate) desc: *mut c_void,
    pub(crate) context: *mut c_void,
    pub(crate) flags: u64,
}

impl EpCore {
    /// `fi_trecvmsg` with probe flags: `FI_PEEK` (optionally with `FI_CLAIM`
    /// or `FI_DISCARD`), or `FI_CLAIM` (optionally with `FI_DISCARD`) for a
    /// message an earlier peek claimed with the same context.
    pub(crate) fn probe(&self, p: Probe) -> isize {
        let en = match self.rx_ready(true) {
            Ok(en) => en,
            Err(e) => return e,
        };
        let context = p.context as usize as u64;
        if p.flags & fi::FI_PEEK != 0 {
            return self.peek(en, &p, context);
        }
        if p.flags & fi::FI_CLAIM == 0 {
            return scode(fi::err(fi::FI_EBADFLAGS)); // FI_DISCARD alone
        }
        let claimed = lock(&self.claims).remove(&context);
        let Some((claim, peeked)) = claimed else {
            return scode(-(libc::EINVAL)); // no peek claimed a message with this context
        };
        if p.flags & fi::FI_DISCARD != 0 {
            return match discard(en, claim) {
                Ok(()) => {
                    report(en, context, Some(Peeked { len: 0, ..peeked }), p.tag);
                    0
                }
                Err(e) => e,
            };
        }
        if p.buf.is_null() && p.len > 0 {
            return scode(-(libc::EINVAL));
        }
        // SAFETY: libfabric's contract: the buffer stays valid and untouched
        // until the receive's completion, and so does the region `desc` names.
        let posted = unsafe { self.buffer(p.buf, p.len, p.desc) }
            .and_then(|buf| en.recv_context(p.context, p.flags).map(|ctx| (buf, ctx)));
        let (buf, xctx) = match posted {
            Ok(b) => b,
            Err(e) => {
                lock(&self.claims).insert(context, (claim, peeked));
                return e;
            }
        };
        match en.ep.post_claimed(claim, buf, xctx) {
            Ok(()) => 0,
            Err(r) => {
                let (claim, _) = r.op;
                lock(&self.claims).insert(context, (claim, peeked));
                scode(entry::code(&r.error))
            }
        }
    }

    fn peek(&self, en: &Enabled, p: &Probe, context: u64) -> isize {
        let src = self.source(p.src);
        let claim = p.flags & (fi::FI_CLAIM | fi::FI_DISCARD) != 0;
        let found = match claim {
            false => en.ep.peek(src, p.tag, p.ignore).map(|f| f.map(|peeked| (peeked, None))),
            true => en
                .ep
                .claim(src, p.tag, p.ignore)
                .map(|f| f.map(|(peeked, c)| (peeked, Some(c)))),
        };
        let found = match found {
            Ok(f) => f,
            Err(e) => return scode(entry::code(&e)),
        };
        match found {
            None => report(en, context, None, p.tag),
            Some((peeked, None)) => report(en, context, Some(peeked), p.tag),
            Some((peeked, Some(c))) if p.flags & fi::FI_DISCARD != 0 => {
                if let Err(e) = discard(en, c) {
                    return e;
                }
                report(en, context, Some(peeked), p.tag);
            }
            Some((peeked, Some(c))) => {
                lock(&self.claims).insert(context, (c, peeked));
                report(en, context, Some(peeked), p.tag);
            }
        }
        0
    }
}

/// Receives a claimed message into nothing; its completion is dropped.
fn discard(en: &Enabled, claim: Claim) -> Result<(), isize> {
    en.ep
        .post_claimed(claim, Buffer::from(Vec::new()), discard_context())
        .map_err(|r| scode(entry::code(&r.error)))
}

/// A probe's answer on the receive CQ: what was found, or `FI_ENOMSG`.
fn report(en: &Enabled, context: u64, found: Option<Peeked>, tag: u64) {
    let Some(cq) = &en.rx else { return };
    let flags = fi::FI_TAGGED | fi::FI_RECV;
    let e = match found {
        Some(p) => Entry {
            context,
            flags: flags | p.data.map_or(0, |_| fi::FI_REMOTE_CQ_DATA),
            len: p.len,
            data: p.data.unwrap_or(0),
            tag: p.tag,
            src: p.src.0,
            buf: 0,
            error: None,
        },
        None => Entry {
            context,
            flags,
            len: 0,
            data: 0,
            tag,
            src: fi::FI_ADDR_UNSPEC,
            buf: 0,
            error: Some((fi::FI_ENOMSG, 0)),
        },
    };
    cq.push(e, true);
}
