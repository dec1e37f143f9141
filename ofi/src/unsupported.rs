//! Collectives: not offered (fi_getinfo refuses `FI_COLLECTIVE`), and every
//! call returns `-FI_ENOSYS` rather than crash a program that calls one
//! anyway.

use std::ffi::c_void;

use crate::entry::enosys;
use crate::fi::*;

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
