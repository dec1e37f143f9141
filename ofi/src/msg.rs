//! `fi_ops_msg`: untagged messages, each mapped onto the xfer endpoint's
//! `post_send` / `post_recv` / `inject*` (see [`crate::ep`]).

use std::ffi::c_void;

use crate::entry::scode;
use crate::ep::{with_ep, Recv, Send};
use crate::fi;
use crate::info::{RX_OP_FLAGS, TX_OP_FLAGS};
use crate::iov;

/// The table every endpoint's `msg` points to.
pub(crate) static OPS: fi::fi_ops_msg = fi::fi_ops_msg {
    size: std::mem::size_of::<fi::fi_ops_msg>(),
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: Some(sendv),
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
};

/// `-FI_EBADFLAGS` unless every bit of `flags` is in `allowed`.
pub(crate) fn check_flags(flags: u64, allowed: u64) -> Result<(), isize> {
    match flags & !allowed {
        0 => Ok(()),
        _ => Err(scode(fi::err(fi::FI_EBADFLAGS))),
    }
}

unsafe extern "C" fn recv(
    ep: *mut fi::fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src: fi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.recv(Recv {
            src,
            tag: None,
            buf,
            len,
            desc,
            context,
            flags: None,
            segs: Vec::new(),
        })
    })
}

unsafe extern "C" fn recvv(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    src: fi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of `count` elements; the one buffer is
    // passed on under `recv`'s contract.
    match unsafe { iov::iovs(iov, desc, count) }.map(iov::split) {
        Ok((buf, len, desc, segs)) => with_ep(ep, |ep| {
            ep.recv(Recv {
                src,
                tag: None,
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

unsafe extern "C" fn recvmsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg, flags: u64) -> isize {
    with_ep(ep, |ep| {
        // SAFETY: null or the caller's message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return scode(-(libc::EINVAL));
        };
        if let Err(e) = check_flags(flags, RX_OP_FLAGS) {
            return e;
        }
        // SAFETY: the message's vector of iov_count elements.
        match unsafe { iov::iovs(m.msg_iov, m.desc, m.iov_count) }.map(iov::split) {
            Ok((buf, len, desc, segs)) => ep.recv(Recv {
                src: m.addr,
                tag: None,
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

unsafe extern "C" fn send(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest: fi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.send(Send {
            peer: dest,
            tag: None,
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

unsafe extern "C" fn sendv(
    ep: *mut fi::fid_ep,
    iov: *const fi::iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest: fi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: the caller's vectors of `count` elements; the one buffer is
    // passed on under `send`'s contract.
    match unsafe { iov::iovs(iov, desc, count) }.map(iov::split) {
        Ok((buf, len, desc, segs)) => with_ep(ep, |ep| {
            ep.send(Send {
                peer: dest,
                tag: None,
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

unsafe extern "C" fn sendmsg(ep: *mut fi::fid_ep, msg: *const fi::fi_msg, flags: u64) -> isize {
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
                tag: None,
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

unsafe extern "C" fn inject(ep: *mut fi::fid_ep, buf: *const c_void, len: usize, dest: fi::fi_addr_t) -> isize {
    with_ep(ep, |ep| ep.inject(dest, None, None, buf, len))
}

unsafe extern "C" fn senddata(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest: fi::fi_addr_t,
    context: *mut c_void,
) -> isize {
    with_ep(ep, |ep| {
        ep.send(Send {
            peer: dest,
            tag: None,
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

unsafe extern "C" fn injectdata(
    ep: *mut fi::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi::fi_addr_t,
) -> isize {
    with_ep(ep, |ep| ep.inject(dest, None, Some(data), buf, len))
}
