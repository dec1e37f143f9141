//! Counters (`fi_cntr_open`): a count of completed operations and a count of
//! failed ones, bound to endpoints for `FI_SEND`, `FI_RECV`, `FI_WRITE` and
//! `FI_READ` (decision 52).
//!
//! xfer has no counters of its own: the completion router that feeds the
//! CQs ([`EpCore::progress`]) counts each completion it routes on the
//! counter bound for its kind, successes and errors apart. Operations that
//! report nothing to a CQ are counted too: an inject at its call (the data is
//! copied, which is its completion), and, under `FI_SELECTIVE_COMPLETION`, a
//! send or RMA without `FI_COMPLETION` is posted with a completion marked
//! [`SILENT`](crate::ep::SILENT), which the router counts and drops unless it
//! failed. Progress is manual, as for
//! CQs: `fi_cntr_read` and `fi_cntr_wait` drive the bound endpoints.
//! Remote counters (`FI_REMOTE_WRITE`, `FI_REMOTE_READ`) need an endpoint
//! with `FI_RMA_EVENT` (elsewhere binding them is `-FI_EINVAL`), offered on
//! `tcp` and `shm` only: such an endpoint's xfer endpoint reports every RMA a peer
//! applies to it (`EndpointAttr::rma_events`), and the router counts those
//! events (and writes with data) and drops the events without data. Bound
//! to a region instead (`fi_mr_bind`), a counter counts the RMA applied to
//! that region ([`region_cntr`](crate::region_cntr)).
//!
//! [`EpCore::progress`]: crate::ep::EpCore::progress

use std::ffi::{c_int, c_void};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cq::{Driven, Wait};
use crate::domain::{self, DomainCore};
use crate::entry::{self, guard, Core, Obj, PANIC};
use crate::ep::EpCore;
use crate::fi;

/// Longest sleep of one `fi_cntr_wait` wait, so xfer's timers are looked at
/// even when no descriptor fires.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// Longest sleep of one wait of a counter bound to a region.
const REGION_SLEEP: Duration = Duration::from_millis(1);

/// A counter's state, shared with the endpoints bound to it.
pub(crate) struct CntrCore {
    pub(crate) domain: Arc<DomainCore>,
    value: AtomicU64,
    errors: AtomicU64,
    wait: Option<Wait>,
    /// The enabled endpoints bound to it, which its reads and waits drive.
    pub(crate) eps: Driven,
    /// Bound to a region (`fi_mr_bind`): its reads and waits also drive the
    /// domain's endpoints with `FI_RMA_EVENT`.
    pub(crate) on_region: AtomicBool,
    /// The wait set it belongs to (`FI_WAIT_SET`), kept open while it does.
    _set: Option<Arc<crate::wait::WaitSetCore>>,
}

/// A counter object.
pub(crate) struct CntrObj(pub(crate) Arc<CntrCore>);

impl Core for CntrObj {
    type Fid = fi::fid_cntr;
    const CLASS: u32 = fi::FI_CLASS_CNTR;
    const MAGIC: u64 = 0x7866_6572_636e_7472; // "xfercntr"
}

static OPS: fi::fi_ops = entry::ops_with_control(close, control);

static CNTR_OPS: fi::fi_ops_cntr = fi::fi_ops_cntr {
    size: std::mem::size_of::<fi::fi_ops_cntr>(),
    read: Some(read),
    readerr: Some(readerr),
    add: Some(add),
    set: Some(set),
    wait: Some(wait),
    adderr: Some(adderr),
    seterr: Some(seterr),
};

impl CntrCore {
    /// Adds an endpoint being enabled (`fd`: its xfer CQ's descriptor, for
    /// waits).
    pub(crate) fn attach(&self, ep: &Arc<EpCore>, fd: RawFd) -> Result<(), xfer_facade::Error> {
        self.eps.attach(ep, self.wait.as_ref(), fd)
    }

    /// Whether the counter has a wait object (its waits sleep on the
    /// endpoints' descriptors).
    pub(crate) fn waits(&self) -> bool {
        self.wait.is_some()
    }

    /// Counts one completed (`ok`) or failed operation.
    pub(crate) fn hit(&self, ok: bool) {
        match ok {
            true => self.value.fetch_add(1, Ordering::AcqRel),
            false => self.errors.fetch_add(1, Ordering::AcqRel),
        };
        if let Some(w) = &self.wait {
            w.poke();
        }
    }

    /// The counts (completed, failed) after driving the bound endpoints.
    pub(crate) fn counts(&self) -> (u64, u64) {
        if let Some(w) = &self.wait {
            w.reset();
        }
        self.progress();
        (self.value.load(Ordering::Acquire), self.errors.load(Ordering::Acquire))
    }

    fn progress(&self) {
        for ep in self.eps.eps().iter() {
            ep.drive(None, None);
        }
        if self.on_region.load(Ordering::Acquire) {
            for ep in self.domain.regions.eps.eps().iter() {
                ep.drive(None, None);
            }
        }
    }

    /// `fi_cntr_wait`: 0 once the count reaches `threshold`, `-FI_EAVAIL`
    /// when an operation fails meanwhile, `-FI_ETIMEDOUT` after `timeout`
    /// ms (negative: no limit).
    fn wait(&self, threshold: u64, timeout: c_int) -> c_int {
        let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        let errors = self.errors.load(Ordering::Acquire);
        loop {
            self.progress();
            let done = || {
                if self.value.load(Ordering::Acquire) >= threshold {
                    Some(0)
                } else if self.errors.load(Ordering::Acquire) != errors {
                    Some(fi::err(fi::FI_EAVAIL))
                } else {
                    None
                }
            };
            if let Some(r) = done() {
                return r;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => MAX_SLEEP,
            };
            if left.is_zero() {
                return -fi::FI_ETIMEDOUT;
            }
            let Some(w) = &self.wait else {
                std::thread::yield_now(); // FI_WAIT_NONE: nothing to sleep on
                continue;
            };
            w.reset();
            if done().is_some() || !self.eps.ready_to_block() {
                continue;
            }
            // Its wait object does not see the endpoints a region's events
            // arrive at: look again soon.
            let most = match self.on_region.load(Ordering::Acquire) {
                true => REGION_SLEEP,
                false => MAX_SLEEP,
            };
            let ms = left.min(most).as_millis().max(1) as i32;
            if let Err(e) = w.sleep(ms) {
                return entry::code(&e);
            }
        }
    }
}

/// `fi_cntr_open`: completion counters (`FI_CNTR_EVENTS_COMP`), wait objects
/// none, unspec and fd.
pub(crate) unsafe extern "C" fn open(
    domain: *mut fi::fid_domain,
    attr: *mut fi::fi_cntr_attr,
    cntr: *mut *mut fi::fid_cntr,
    context: *mut c_void,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our domain.
        let Some(domain) = (unsafe { domain::get(domain) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: null or the application's attributes.
        let attr = unsafe { attr.as_ref() }.copied().unwrap_or_default();
        if attr.events != fi::FI_CNTR_EVENTS_COMP || attr.flags != 0 {
            return -(libc::ENOSYS);
        }
        let (wait, set) = match crate::wait::object(attr.wait_obj, attr.wait_set) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let serial = domain.serial();
        let core = Arc::new(CntrCore {
            domain,
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            wait,
            eps: Driven::new(serial),
            on_region: AtomicBool::new(false),
            _set: set.clone(),
        });
        if let (Some(set), Some(w)) = (set, &core.wait) {
            let m = crate::wait::Member::Cntr(Arc::downgrade(&core), core.counts());
            if let Err(e) = set.add(m, w.fd()) {
                return e;
            }
        }
        let fid = fi::fid_cntr {
            fid: entry::fid(fi::FI_CLASS_CNTR, context, &OPS),
            ops: entry::ops(&CNTR_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(cntr, fid, CntrObj(core)) }
    })
}

/// The counter behind `fid`.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn get(fid: *const fi::fid) -> Option<Arc<CntrCore>> {
    // SAFETY: forwarded.
    unsafe { Obj::<CntrObj>::get(fid) }.map(|o| o.core.0.clone())
}

/// Runs `f` on the counter behind `cntr` (`on_bad` when it is not one).
fn with_cntr<R: Copy>(cntr: *mut fi::fid_cntr, on_bad: R, f: impl FnOnce(&CntrCore) -> R) -> R {
    guard(on_bad, || {
        // SAFETY: libfabric passes the application's fid_cntr, open for the
        // whole call.
        match unsafe { Obj::<CntrObj>::get(cntr.cast()) } {
            Some(obj) => f(&obj.core.0),
            None => on_bad,
        }
    })
}

/// `fi_cntr_read`: drives the bound endpoints, then the count (0 for a
/// handle that is not a counter: the call has no error return).
unsafe extern "C" fn read(cntr: *mut fi::fid_cntr) -> u64 {
    with_cntr(cntr, 0, |c| {
        c.progress();
        c.value.load(Ordering::Acquire)
    })
}

unsafe extern "C" fn readerr(cntr: *mut fi::fid_cntr) -> u64 {
    with_cntr(cntr, 0, |c| {
        c.progress();
        c.errors.load(Ordering::Acquire)
    })
}

/// Changes the counts (`fi_cntr_add`, `set`, `adderr`, `seterr`) and wakes
/// a waiter to look at them.
fn change(cntr: *mut fi::fid_cntr, f: impl FnOnce(&CntrCore)) -> c_int {
    with_cntr(cntr, -(libc::EINVAL), |c| {
        f(c);
        if let Some(w) = &c.wait {
            w.poke();
        }
        0
    })
}

unsafe extern "C" fn add(cntr: *mut fi::fid_cntr, value: u64) -> c_int {
    change(cntr, |c| {
        c.value.fetch_add(value, Ordering::AcqRel);
    })
}

unsafe extern "C" fn set(cntr: *mut fi::fid_cntr, value: u64) -> c_int {
    change(cntr, |c| c.value.store(value, Ordering::Release))
}

unsafe extern "C" fn adderr(cntr: *mut fi::fid_cntr, value: u64) -> c_int {
    change(cntr, |c| {
        c.errors.fetch_add(value, Ordering::AcqRel);
    })
}

unsafe extern "C" fn seterr(cntr: *mut fi::fid_cntr, value: u64) -> c_int {
    change(cntr, |c| c.errors.store(value, Ordering::Release))
}

unsafe extern "C" fn wait(cntr: *mut fi::fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    with_cntr(cntr, -(libc::EINVAL), |c| c.wait(threshold, timeout))
}

unsafe extern "C" fn control(fid: *mut fi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(obj) = (unsafe { Obj::<CntrObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        Wait::control(obj.core.0.wait.as_ref(), command, arg)
    })
}

unsafe extern "C" fn close(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<CntrObj>(fid, |o| Arc::strong_count(&o.0) > 1)
}
