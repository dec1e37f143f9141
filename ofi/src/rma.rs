//! `fi_ops_rma`: `fi_read`, `fi_write`, `fi_writedata`, `fi_inject_write`,
//! `fi_inject_writedata` and their `v`/`msg` forms, mapped onto xfer's RMA
//! ([`Endpoint::post_rma`], [`Endpoint::inject_write`],
//! [`Endpoint::inject_write_data`]). Remote memory is named as fi_rma(3)
//! says under `FI_MR_VIRT_ADDR | FI_MR_PROV_KEY`: the target's virtual
//! address and the key `fi_mr_key` gave there, which are exactly an
//! [`RmaOp`]'s `addr` and `key`. The target checks both (a bad key, a range
//! outside the region or a right the region lacks fail the operation with
//! `FI_EACCES` at the initiator). A write completes once the target applied
//! it; `fi_writedata` also puts a `FI_RMA | FI_REMOTE_WRITE |
//! FI_REMOTE_CQ_DATA` entry with the data on the target's receive CQ.
//!
//! [`Endpoint::post_rma`]: xfer_facade::Endpoint::post_rma
//! [`Endpoint::inject_write`]: xfer_facade::Endpoint::inject_write
//! [`Endpoint::inject_write_data`]: xfer_facade::Endpoint::inject_write_data

use std::ffi::c_void;

use xfer_facade::{Buffer, PeerAddr, RemoteKey, RmaKind, RmaOp};

use crate::entry::{self, scode};
use crate::ep::{bytes, with_ep, Enabled, EpCore, SILENT};
use crate::fi;
use crate::info::MAX_MSG_SIZE;
use crate::iov::{self, Bufs};
use crate::join::RMA_IOV_LIMIT;
use crate::msg::check_flags;

/// The table every endpoint's `rma` points to.
pub(crate) static OPS: fi::fi_ops_rma = fi::fi_ops_rma {
    size: std::mem::size_of::<fi::fi_ops_rma>(),
    read: Some(read),
    readv: Some(readv),
    readmsg: Some(readmsg),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    writedata: Some(writedata),
    injectdata: Some(injectdata),
};

/// Flags a `fi_writemsg` may carry. A write completes when the target has
/// applied it, which is every completion level libfabric names.
const WRITE_FLAGS: u64 = fi::FI_COMPLETION
    | fi::FI_INJECT
    | fi::FI_REMOTE_CQ_DATA
    | fi::FI_INJECT_COMPLETE
    | fi::FI_TRANSMIT_COMPLETE
    | fi::FI_DELIVERY_COMPLETE
    | fi::FI_MORE;
/// Flags a `fi_readmsg` may carry.
const READ_FLAGS: u64 = fi::FI_COMPLETION | fi::FI_MORE;

/// An RMA operation as the libfabric calls describe it.
pub(crate) struct Rma {
    peer: fi::fi_addr_t,
    kind: RmaKind,
    buf: *mut c_void,
    len: usize,
    /// The local buffer's `fi_mr_desc` (used under `FI_MR_LOCAL`).
    desc: *mut c_void,
    /// The remote segment (the first of several).
    addr: u64,
    key: u64,
    /// Two to [`RMA_IOV_LIMIT`] remote segments of an `fi_writemsg` or
    /// `fi_readmsg` (`addr` and `key` are then the first's); empty for one.
    remote: Vec<fi::fi_rma_iov>,
    data: Option<u64>,
    context: *mut c_void,
    /// `*msg` flags, or the endpoint's default transmit flags.
    flags: Option<u64>,
    /// Two to [`IOV_LIMIT`](crate::iov::IOV_LIMIT) local buffers (`buf` is
    /// then null and `len` their total): a write sends a copy gathered from
    /// them, a read lands in a staging buffer the router scatters into them.
    segs: Vec<(*mut c_void, usize)>,
}

impl Rma {
    /// An operation on one local buffer (`buf`, `len`, `desc`) and the
    /// remote memory at `addr` under `key`.
    fn one(
        peer: fi::fi_addr_t,
        kind: RmaKind,
        (buf, len, desc): (*mut c_void, usize, *mut c_void),
        (addr, key): (u64, u64),
        context: *mut c_void,
    ) -> Rma {
        Rma {
            peer,
            kind,
            buf,
            len,
            desc,
            addr,
            key,
            remote: Vec::new(),
            data: None,
            context,
            flags: None,
            segs: Vec::new(),
        }
    }

    /// The operation on the buffers of a local I/O vector instead.
    fn local(self, bufs: Bufs) -> Rma {
        let (buf, len, desc, segs) = iov::split(bufs);
        Rma {
            buf,
            len,
            desc,
            segs,
            ..self
        }
    }
}

impl EpCore {
    /// Posts a read or write (`fi_read`, `fi_write`, `fi_writedata`, `*v`, `*msg`).
    fn rma(&self, r: Rma) -> isize {
        let en = match self.tx_ready(fi::FI_RMA) {
            Ok(en) => en,
            Err(e) => return e,
        };
        if r.len > MAX_MSG_SIZE {
            return scode(-(libc::EMSGSIZE));
        }
        if r.buf.is_null() && r.len > 0 && r.segs.is_empty() {
            return scode(-(libc::EINVAL));
        }
        let flags = r.flags.unwrap_or(self.tx_op_flags);
        if !r.remote.is_empty() {
            return self.rma_joined(en, r, flags);
        }
        if r.kind == RmaKind::Read && !r.segs.is_empty() {
            return self.read_staged(en, r, flags);
        }
        let buf = if !r.segs.is_empty() {
            if flags & fi::FI_INJECT != 0 && r.len > en.inject_size {
                return scode(-(libc::EMSGSIZE));
            }
            // SAFETY: libfabric's contract: each element is valid for its length.
            Buffer::from(unsafe { iov::gather(&r.segs) })
        } else if r.kind == RmaKind::Write && flags & fi::FI_INJECT != 0 {
            if r.len > en.inject_size {
                return scode(-(libc::EMSGSIZE));
            }
            // SAFETY: checked non-null for len > 0; the caller's buffer.
            Buffer::from(unsafe { bytes(r.buf, r.len) }.to_vec())
        } else {
            // SAFETY: libfabric's contract: the buffer stays valid (and, for
            // a read, untouched) until the operation's completion, and so
            // does the region `desc` names.
            match unsafe { self.buffer(r.buf, r.len, r.desc) } {
                Ok(b) => b,
                Err(e) => return e,
            }
        };
        let counter = match r.kind {
            RmaKind::Read => &en.counters.read,
            _ => &en.counters.write,
        };
        let (context, completion) = match en.completion(r.context, flags, counter.is_some()) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let op = RmaOp {
            peer: PeerAddr(r.peer),
            kind: r.kind,
            buf,
            addr: r.addr,
            key: r.key,
            data: r.data,
            context,
            completion,
        };
        match en.ep.post_rma(op) {
            Ok(()) => 0,
            Err(rej) => scode(entry::code(&rej.error)),
        }
    }

    /// A read into several buffers: xfer reads into one staging buffer
    /// ([`Scatters`](crate::iov::Scatters)) and the router copies it into
    /// the buffers at the completion, which is therefore always asked of
    /// xfer (marked silent when the application did not ask for one).
    #[cold]
    fn read_staged(&self, en: &Enabled, r: Rma, flags: u64) -> isize {
        let counted = en.counters.read.is_some();
        let context = match en.completion(r.context, flags, counted) {
            Ok((c, true)) => c,
            Ok((c, false)) => c | SILENT,
            Err(e) => return e,
        };
        let silent = context & SILENT;
        let (token, ptr, total) = en.scatters.stage(context & !SILENT, &r.segs);
        let op = RmaOp {
            peer: PeerAddr(r.peer),
            kind: RmaKind::Read,
            // SAFETY: the staging buffer lives in `scatters` until the read
            // completes (or the endpoint is gone).
            buf: unsafe { Buffer::raw(ptr, total) },
            addr: r.addr,
            key: r.key,
            data: None,
            context: token | silent,
            completion: true,
        };
        match en.ep.post_rma(op) {
            Ok(()) => 0,
            Err(rej) => {
                en.scatters.forget(token);
                scode(entry::code(&rej.error))
            }
        }
    }

    /// An operation over several remote segments: one xfer operation per
    /// segment, joined into one completion by the router
    /// ([`Joins`](crate::join::Joins)). A write sends a copy of the local
    /// bytes, cut in segment order (the data of `FI_REMOTE_CQ_DATA` goes
    /// with the last part, which the target applies last: one connection
    /// keeps RMA in order); a read lands in a staging buffer that the
    /// router scatters into the local buffers at the completion.
    #[cold]
    fn rma_joined(&self, en: &Enabled, r: Rma, flags: u64) -> isize {
        let counted = match r.kind {
            RmaKind::Read => en.counters.read.is_some(),
            RmaKind::Write => en.counters.write.is_some(),
        };
        // Every part reports to the router; the operation's own completion
        // is marked silent when the application did not ask for one.
        let context = match en.completion(r.context, flags, counted) {
            Ok((c, true)) => c,
            Ok((c, false)) => c | SILENT,
            Err(e) => return e,
        };
        let local = match r.segs.is_empty() {
            true => vec![(r.buf, r.len)],
            false => r.segs,
        };
        // Each part's segment and buffer, and the staging token of a read.
        let (parts, staged): (Vec<(usize, Buffer)>, Option<u64>) = match r.kind {
            RmaKind::Write => {
                if flags & fi::FI_INJECT != 0 && r.len > en.inject_size {
                    return scode(-(libc::EMSGSIZE));
                }
                // SAFETY: libfabric's contract: each buffer is valid for its length.
                let all = unsafe { iov::gather(&local) };
                let parts = cut(&r.remote, all.len());
                let bufs = parts
                    .iter()
                    .map(|&(i, at, n)| (i, Buffer::from(all[at..at + n].to_vec())));
                (bufs.collect(), None)
            }
            RmaKind::Read => {
                let (token, ptr, total) = en.scatters.stage(context & !SILENT, &local);
                let parts = cut(&r.remote, total);
                // SAFETY: the staging buffer lives in `scatters` until the
                // read completes (or the endpoint is gone); the parts are
                // disjoint ranges of it.
                let bufs = parts
                    .iter()
                    .map(|&(i, at, n)| (i, unsafe { Buffer::raw(ptr.add(at), n) }));
                (bufs.collect(), Some(token))
            }
        };
        let count = parts.len();
        let token = en
            .joins
            .start(staged.map_or(context, |t| t | (context & SILENT)), count);
        for (i, (seg, buf)) in parts.into_iter().enumerate() {
            let seg = &r.remote[seg];
            let op = RmaOp {
                peer: PeerAddr(r.peer),
                kind: r.kind,
                buf,
                addr: seg.addr,
                key: seg.key,
                data: if i + 1 == count { r.data } else { None },
                context: token,
                completion: true,
            };
            if let Err(rej) = en.ep.post_rma(op) {
                // Parts already out complete the operation with this error;
                // with none out, the call fails and nothing is reported.
                if en.joins.unposted(token, count - i, rej.error.clone()) {
                    return 0;
                }
                if let Some(t) = staged {
                    en.scatters.forget(t);
                }
                return scode(entry::code(&rej.error));
            }
        }
        0
    }

    /// `fi_inject_write`, `fi_inject_writedata`: copied, no completion.
    fn inject_write(
        &self,
        peer: fi::fi_addr_t,
        buf: *const c_void,
        len: usize,
        addr: u64,
        key: u64,
        data: Option<u64>,
    ) -> isize {
        let en = match self.tx_ready(fi::FI_RMA) {
            Ok(en) => en,
            Err(e) => return e,
        };
        if len > en.inject_size {
            return scode(-(libc::EMSGSIZE));
        }
        if buf.is_null() && len > 0 {
            return scode(-(libc::EINVAL));
        }
        let remote = match RemoteKey::from_parts(en.ep.provider_id(), addr, len as u64, key) {
            Ok(k) => k,
            Err(e) => return scode(entry::code(&e)),
        };
        // SAFETY: checked non-null for len > 0; the caller's buffer.
        let payload = unsafe { bytes(buf, len) };
        let r = match data {
            None => en.ep.inject_write(PeerAddr(peer), payload, &remote, 0),
            Some(d) => en.ep.inject_write_data(PeerAddr(peer), payload, &remote, 0, d),
        };
        match r {
            Ok(()) => {
                if let Some(k) = &en.counters.write {
                    k.hit(true); // copied and sent: an inject's completion
                }
                0
            }
            Err(e) => scode(entry::code(&e)),
        }
    }
}

/// How `len` bytes go across remote segments `remote`, in order: for
/// each part, its segment's index, its offset into the bytes and its
/// length. Segments left with nothing get no part, except that a
/// zero-length operation has one part, on the first segment.
fn cut(remote: &[fi::fi_rma_iov], len: usize) -> Vec<(usize, usize, usize)> {
    let mut at = 0usize;
    let mut parts = Vec::with_capacity(remote.len());
    for (i, seg) in remote.iter().enumerate() {
        let n = seg.len.min(len - at);
        if n > 0 || (len == 0 && i == 0) {
            parts.push((i, at, n));
        }
        at += n;
    }
    parts
}

/// The remote segments of an `fi_msg_rma`: one to [`RMA_IOV_LIMIT`]
/// (`tx_attr->rma_iov_limit`), else `-FI_EINVAL`.
///
/// # Safety
/// `rma_iov` is null or valid for `count` elements.
unsafe fn rma_iovs<'a>(rma_iov: *const fi::fi_rma_iov, count: usize) -> Result<&'a [fi::fi_rma_iov], isize> {
    if rma_iov.is_null() || count == 0 || count > RMA_IOV_LIMIT {
        return Err(scode(-(libc::EINVAL)));
    }
    // SAFETY: non-null and valid for `count` elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(rma_iov, count) })
}

/// An `fi_readmsg` / `fi_writemsg` as an [`Rma`].
///
/// # Safety
/// `msg` is null or the caller's message, its vectors valid for their counts.
unsafe fn from_msg(msg: *const fi::fi_msg_rma, kind: RmaKind, flags: u64) -> Result<Rma, isize> {
    // SAFETY: null or the caller's message.
    let m = unsafe { msg.as_ref() }.ok_or(scode(-(libc::EINVAL)))?;
    let allowed = if kind == RmaKind::Write {
        WRITE_FLAGS
    } else {
        READ_FLAGS
    };
    check_flags(flags, allowed)?;
    // SAFETY: the message's vectors, by the caller's contract.
    let bufs = unsafe { iov::iovs(m.msg_iov, m.desc, m.iov_count) }?;
    // SAFETY: as above.
    let remote = unsafe { rma_iovs(m.rma_iov, m.rma_iov_count) }?;
    let empty = (std::ptr::null_mut(), 0, std::ptr::null_mut());
    let r = Rma {
        data: (flags & fi::FI_REMOTE_CQ_DATA != 0).then_some(m.data),
        flags: Some(flags),
        remote: if remote.len() > 1 { remote.to_vec() } else { Vec::new() },
        ..Rma::one(m.addr, kind, empty, (remote[0].addr, remote[0].key), m.context)
    }
    .local(bufs);
    // The remote segments take the local bytes (fi_rma(3)).
    let room = remote.iter().fold(0usize, |t, s| t.saturating_add(s.len));
    if room < r.len {
        return Err(scode(-(libc::EINVAL)));
    }
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn read(
    ep: *mut fi::fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: fi::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.rma(Rma::one(src, RmaKind::Read, (buf, len, desc), (addr, key), context))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readv(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    src: fi::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of `count` elements, valid (and the
    // buffers untouched) until the read completes.
    unsafe { vectored(ep, iov, desc, count, src, RmaKind::Read, addr, key, context) }
}

unsafe extern "C" fn readmsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the caller's message.
    with_ep(ep, |ep| match unsafe { from_msg(msg, RmaKind::Read, flags) } {
        Ok(r) => ep.rma(r),
        Err(e) => e,
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn write(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let buf = buf as *mut c_void;
    with_ep(ep, |ep| {
        ep.rma(Rma::one(dest, RmaKind::Write, (buf, len, desc), (addr, key), context))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writev(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of `count` elements, valid until the
    // write completes.
    unsafe { vectored(ep, iov, desc, count, dest, RmaKind::Write, addr, key, context) }
}

/// `fi_readv`/`fi_writev`: one operation over the local buffers of `iov`
/// (at most the iov limit; a read lands in a staging buffer that the
/// completion scatters), one remote segment.
///
/// # Safety
/// `iov` and `desc` point to `count` valid elements whose buffers stay
/// valid (a read's untouched) until the operation completes.
#[allow(clippy::too_many_arguments)]
unsafe fn vectored(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    peer: fi::fi_addr_t,
    kind: RmaKind,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: forwarded from the caller's contract.
    let bufs = match unsafe { iov::iovs(iov, desc, count) } {
        Ok(b) => b,
        Err(e) => return e,
    };
    let empty = (std::ptr::null_mut(), 0, std::ptr::null_mut());
    with_ep(ep, |ep| {
        ep.rma(Rma::one(peer, kind, empty, (addr, key), context).local(bufs))
    })
}

unsafe extern "C" fn writemsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the caller's message.
    with_ep(ep, |ep| match unsafe { from_msg(msg, RmaKind::Write, flags) } {
        Ok(r) => ep.rma(r),
        Err(e) => e,
    })
}

unsafe extern "C" fn inject(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    with_ep(ep, |ep| ep.inject_write(dest, buf, len, addr, key, None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writedata(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let buf = buf as *mut c_void;
    with_ep(ep, |ep| {
        ep.rma(Rma {
            data: Some(data),
            ..Rma::one(dest, RmaKind::Write, (buf, len, desc), (addr, key), context)
        })
    })
}

unsafe extern "C" fn injectdata(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    with_ep(ep, |ep| ep.inject_write(dest, buf, len, addr, key, Some(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(lens: &[usize]) -> Vec<fi::fi_rma_iov> {
        lens.iter()
            .map(|&len| fi::fi_rma_iov { addr: 0, len, key: 0 })
            .collect()
    }

    #[test]
    fn bytes_are_cut_in_segment_order_past_empty_segments() {
        assert_eq!(cut(&segs(&[5, 0, 5]), 10), [(0, 0, 5), (2, 5, 5)]);
        assert_eq!(cut(&segs(&[0, 4, 100]), 10), [(1, 0, 4), (2, 4, 6)]);
        assert_eq!(
            cut(&segs(&[8, 8]), 8),
            [(0, 0, 8)],
            "the rest of the room is not written"
        );
        assert_eq!(cut(&segs(&[0, 8]), 0), [(0, 0, 0)], "an empty write has one part");
    }
}
