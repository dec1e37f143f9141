//! `fi_ops_tagged`: tagged messages (64-bit tag, ignore mask, directed or
//! any-source receive), mapped like [`crate::msg`]. `fi_trecvmsg` with
//! `FI_PEEK`, `FI_CLAIM` or `FI_DISCARD` goes to [`crate::peek`].

use std::ffi::c_void;

use crate::entry::scode;
use crate::ep::{with_ep, Recv, Send};
use crate::fi;
use crate::info::{RX_OP_FLAGS, TX_OP_FLAGS};
use crate::iov;
use crate::msg::check_flags;
use crate::peek::{Probe, PROBE_FLAGS};

/// The table every endpoint's `tagged` points to.
pub(crate) static OPS: fi::fi_ops_tagged = fi::fi_ops_tagged {
    size: std::mem::size_of::<fi::fi_ops_tagged>(),
    recv: Some(trecv),
    recvv: Some(trecvv),
    recvmsg: Some(trecvmsg),
    send: Some(tsend),
    sendv: Some(tsendv),
    sendmsg: Some(tsendmsg),
    inject: Some(tinject),
    senddata: Some(tsenddata),
    injectdata: Some(tinjectdata),
};

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecv(
    ep: *mut fi::fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: fi::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.recv(Recv {
            src,
            tag: Some((tag, ignore)),
            buf,
            len,
            desc,
            context,
            flags: None,
            segs: Vec::new(),
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecvv(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    src: fi::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of `count` elements; the one buffer is
    // passed on under `trecv`'s contract.
    match unsafe { iov::iovs(iov, desc, count) }.map(iov::split) {
        Ok((buf, len, desc, segs)) => with_ep(ep, |ep| {
            ep.recv(Recv {
                src,
                tag: Some((tag, ignore)),
                buf,
                len,
                desc,
                context,
                flags: None,
                segs,
            })
        }),
        Err(e) => e,
    }
}

unsafe extern "C" fn trecvmsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg_tagged, flags: u64) -> isize {
    with_ep(ep, |ep| {
        // SAFETY: null or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return scode(-(libc::EINVAL));
        };
        if let Err(e) = check_flags(flags, RX_OP_FLAGS | PROBE_FLAGS) {
            return e;
        }
        // SAFETY: the message's vector of iov_count elements.
        match unsafe { iov::iovs(m.msg_iov, m.desc, m.iov_count) }.map(iov::split) {
            Ok((.., segs)) if flags & PROBE_FLAGS != 0 && !segs.is_empty() => scode(-(libc::EINVAL)),
            Ok((buf, len, desc, _)) if flags & PROBE_FLAGS != 0 => ep.probe(Probe {
                src: m.addr,
                tag: m.tag,
                ignore: m.ignore,
                buf,
                len,
                desc,
                context: m.context,
                flags,
            }),
            Ok((buf, len, desc, segs)) => ep.recv(Recv {
                src: m.addr,
                tag: Some((m.tag, m.ignore)),
                buf,
                len,
                desc,
                context: m.context,
                flags: Some(flags),
                segs,
            }),
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn tsend(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: fi::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.send(Send {
            peer: dest,
            tag: Some(tag),
            data: None,
            buf,
            len,
            desc,
            context,
            flags: None,
            segs: Vec::new(),
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsendv(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: fi::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of `count` elements; the one buffer is
    // passed on under `tsend`'s contract.
    match unsafe { iov::iovs(iov, desc, count) }.map(iov::split) {
        Ok((buf, len, desc, segs)) => with_ep(ep, |ep| {
            ep.send(Send {
                peer: dest,
                tag: Some(tag),
                data: None,
                buf,
                len,
                desc,
                context,
                flags: None,
                segs,
            })
        }),
        Err(e) => e,
    }
}

unsafe extern "C" fn tsendmsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg_tagged, flags: u64) -> isize {
    with_ep(ep, |ep| {
        // SAFETY: null or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return scode(-(libc::EINVAL));
        };
        if let Err(e) = check_flags(flags, TX_OP_FLAGS) {
            return e;
        }
        // SAFETY: the message's vector of iov_count elements.
        match unsafe { iov::iovs(m.msg_iov, m.desc, m.iov_count) }.map(iov::split) {
            Ok((buf, len, desc, segs)) => ep.send(Send {
                peer: m.addr,
                tag: Some(m.tag),
                data: (flags & fi::FI_REMOTE_CQ_DATA != 0).then_some(m.data),
                buf,
                len,
                desc,
                context: m.context,
                flags: Some(flags),
                segs,
            }),
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn tinject(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi::fi_addr_t,
    tag: u64,
) -> isize {
    with_ep(ep, |ep| ep.inject(dest, Some(tag), None, buf, len))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsenddata(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest: fi::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.send(Send {
            peer: dest,
            tag: Some(tag),
            data: Some(data),
            buf,
            len,
            desc,
            context,
            flags: None,
            segs: Vec::new(),
        })
    })
}

unsafe extern "C" fn tinjectdata(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi::fi_addr_t,
    tag: u64,
) -> isize {
    with_ep(ep, |ep| ep.inject(dest, Some(tag), Some(data), buf, len))
}
