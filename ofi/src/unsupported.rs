//! Atomics and collectives: not offered (fi_getinfo refuses `FI_ATOMIC`,
//! `FI_COLLECTIVE`), and every call returns `-FI_ENOSYS` rather than crash a
//! program that calls one anyway.

use std::ffi::{c_int, c_void};

use crate::entry::enosys;
use crate::fi::*;

enosys! {
    atomic_write(*mut fid_ep, *const c_void, usize, *mut c_void, fi_addr_t, u64, u64, fi_datatype, fi_op, *mut c_void) -> isize;
    atomic_writev(*mut fid_ep, *const fi_ioc, *mut *mut c_void, usize, fi_addr_t, u64, u64, fi_datatype, fi_op, *mut c_void) -> isize;
    atomic_writemsg(*mut fid_ep, *const fi_msg_atomic, u64) -> isize;
    atomic_inject(*mut fid_ep, *const c_void, usize, fi_addr_t, u64, u64, fi_datatype, fi_op) -> isize;
    atomic_readwrite(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, u64, u64, fi_datatype, fi_op, *mut c_void) -> isize;
    atomic_readwritev(*mut fid_ep, *const fi_ioc, *mut *mut c_void, usize, *mut fi_ioc, *mut *mut c_void, usize, fi_addr_t, u64, u64, fi_datatype, fi_op, *mut c_void) -> isize;
    atomic_readwritemsg(*mut fid_ep, *const fi_msg_atomic, *mut fi_ioc, *mut *mut c_void, usize, u64) -> isize;
    atomic_compwrite(*mut fid_ep, *const c_void, usize, *mut c_void, *const c_void, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, u64, u64, fi_datatype, fi_op, *mut c_void) -> isize;
    atomic_compwritev(*mut fid_ep, *const fi_ioc, *mut *mut c_void, usize, *const fi_ioc, *mut *mut c_void, usize, *mut fi_ioc, *mut *mut c_void, usize, fi_addr_t, u64, u64, fi_datatype, fi_op, *mut c_void) -> isize;
    atomic_compwritemsg(*mut fid_ep, *const fi_msg_atomic, *const fi_ioc, *mut *mut c_void, usize, *mut fi_ioc, *mut *mut c_void, usize, u64) -> isize;
    atomic_writevalid(*mut fid_ep, fi_datatype, fi_op, *mut usize) -> c_int;
    atomic_readwritevalid(*mut fid_ep, fi_datatype, fi_op, *mut usize) -> c_int;
    atomic_compwritevalid(*mut fid_ep, fi_datatype, fi_op, *mut usize) -> c_int;
}

/// `fi_ops_atomic`: every entry `-FI_ENOSYS`.
pub(crate) static ATOMIC_OPS: fi_ops_atomic = fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

enosys! {
    coll_barrier(*mut fid_ep, fi_addr_t, *mut c_void) -> isize;
    coll_broadcast(*mut fid_ep, *mut c_void, usize, *mut c_void, fi_addr_t, fi_addr_t, fi_datatype, u64, *mut c_void) -> isize;
    coll_alltoall(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_datatype, u64, *mut c_void) -> isize;
    coll_allreduce(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_datatype, fi_op, u64, *mut c_void) -> isize;
    coll_allgather(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_datatype, u64, *mut c_void) -> isize;
    coll_reduce_scatter(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_datatype, fi_op, u64, *mut c_void) -> isize;
    coll_reduce(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_addr_t, fi_datatype, fi_op, u64, *mut c_void) -> isize;
    coll_scatter(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_addr_t, fi_datatype, u64, *mut c_void) -> isize;
    coll_gather(*mut fid_ep, *const c_void, usize, *mut c_void, *mut c_void, *mut c_void, fi_addr_t, fi_addr_t, fi_datatype, u64, *mut c_void) -> isize;
    coll_msg(*mut fid_ep, *const fi_msg_collective, *mut fi_ioc, *mut *mut c_void, usize, u64) -> isize;
    coll_barrier2(*mut fid_ep, fi_addr_t, u64, *mut c_void) -> isize;
}

/// `fi_ops_collective`: every entry `-FI_ENOSYS`.
pub(crate) static COLLECTIVE_OPS: fi_ops_collective = fi_ops_collective {
    size: std::mem::size_of::<fi_ops_collective>(),
    barrier: Some(coll_barrier),
    broadcast: Some(coll_broadcast),
    alltoall: Some(coll_alltoall),
    allreduce: Some(coll_allreduce),
    allgather: Some(coll_allgather),
    reduce_scatter: Some(coll_reduce_scatter),
    reduce: Some(coll_reduce),
    scatter: Some(coll_scatter),
    gather: Some(coll_gather),
    msg: Some(coll_msg),
    barrier2: Some(coll_barrier2),
};
