//! Wait sets (`fi_wait_open`, `fi_wait`) and poll sets (`fi_poll_open`,
//! `fi_poll`): several CQs, counters and EQs waited on or checked at once.
//!
//! A member opened with `FI_WAIT_SET` keeps its own [`Wait`] (what its
//! `fi_cq_sread`/`fi_cntr_wait` sleep on); the set's epoll watches that
//! descriptor, so `fi_wait` sleeps on every member at once. Progress is
//! manual: `fi_wait` and `fi_poll` drive the members' endpoints (a CQ's
//! entries are routed into its queue, where the next read finds them).
//! A counter has an event when its counts changed since the set last
//! looked (libfabric's util poll sets do the same).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use xfer_core::unstable::sys::{Epoll, EMPTY_EVENT, READABLE};

use crate::cntr::{self, CntrCore};
use crate::cq::{self, CqCore, Wait};
use crate::domain::{self, DomainCore};
use crate::entry::{self, guard, lock, Core, Obj, PANIC};
use crate::eq::{self, EqCore};
use crate::fabric::{self, Fabric};
use crate::fi;

/// Longest sleep of one `fi_wait` round, so xfer's timers are looked at
/// even when no descriptor fires.
const MAX_SLEEP: Duration = Duration::from_millis(20);

/// A CQ, counter or EQ in a set (weak: the set does not keep it open).
#[derive(Clone)]
pub(crate) enum Member {
    Cq(Weak<CqCore>),
    Cntr(Weak<CntrCore>, (u64, u64)),
    Eq(Weak<EqCore>),
}

impl Member {
    /// Whether the member has something to read (driving its endpoints
    /// first); a counter's counts seen are updated. `None` once it closed.
    fn ready(&mut self) -> Option<bool> {
        match self {
            Member::Cq(cq) => Some(cq.upgrade()?.ready()),
            Member::Cntr(k, seen) => {
                let now = k.upgrade()?.counts();
                let changed = now != *seen;
                *seen = now;
                Some(changed)
            }
            Member::Eq(eq) => Some(eq.upgrade()?.ready()),
        }
    }

    /// Whether the object is still open.
    fn alive(&self) -> bool {
        match self {
            Member::Cq(w) => w.strong_count() > 0,
            Member::Cntr(w, _) => w.strong_count() > 0,
            Member::Eq(w) => w.strong_count() > 0,
        }
    }

    /// Whether this is the object at `ptr`.
    fn is(&self, ptr: *const c_void) -> bool {
        match self {
            Member::Cq(w) => w.as_ptr().cast() == ptr,
            Member::Cntr(w, _) => w.as_ptr().cast() == ptr,
            Member::Eq(w) => w.as_ptr().cast() == ptr,
        }
    }
}

/// The member behind a CQ, counter or EQ fid, with its state's address.
///
/// # Safety
/// `fid` is null or a live fid.
unsafe fn member_of(fid: *mut fi::fid) -> Option<Member> {
    // SAFETY: the caller's contract.
    let class = unsafe { fid.as_ref() }?.fclass as u32;
    // SAFETY (each arm): a live fid, checked by class and magic.
    match class {
        fi::FI_CLASS_CQ => unsafe { cq::get(fid) }.map(|c| Member::Cq(Arc::downgrade(&c))),
        fi::FI_CLASS_CNTR => unsafe { cntr::get(fid) }.map(|k| Member::Cntr(Arc::downgrade(&k), k.counts())),
        fi::FI_CLASS_EQ => unsafe { eq::get(fid) }.map(|e| Member::Eq(Arc::downgrade(&e))),
        _ => None,
    }
}

/// `fi_trywait` for one fid: whether the caller may block on its wait
/// object (nothing to read; a CQ's or counter's endpoints armed), `None`
/// when it is none of a CQ, counter, EQ or wait set.
///
/// # Safety
/// `fid` is null or a live fid.
pub(crate) unsafe fn try_wait(fid: *mut fi::fid) -> Option<bool> {
    // SAFETY: the caller's contract.
    let class = unsafe { fid.as_ref() }?.fclass as u32;
    if class == fi::FI_CLASS_WAIT {
        // SAFETY: a live fid, checked by class and magic.
        let set = unsafe { Obj::<WaitSetObj>::get(fid) }?.core.0.clone();
        let mut members = lock(&set.members);
        return Some(!members.iter_mut().any(|m| m.ready() == Some(true)));
    }
    // SAFETY: forwarded.
    let mut m = unsafe { member_of(fid) }?;
    if let Member::Cntr(k, seen) = &mut m {
        // A counter is "ready" when it moved since its wait object was last
        // reset; its fresh snapshot says nothing, so arm its endpoints.
        let k = k.upgrade()?;
        *seen = k.counts();
        return Some(k.eps.ready_to_block());
    }
    Some(m.ready() == Some(false))
}

/// A wait set's state, shared with its members (which keep it open).
pub(crate) struct WaitSetCore {
    _fabric: Arc<Fabric>,
    epoll: Epoll,
    members: Mutex<Vec<Member>>,
}

impl WaitSetCore {
    /// Adds a member whose wait descriptor is `fd`.
    pub(crate) fn add(&self, m: Member, fd: std::os::fd::RawFd) -> Result<(), c_int> {
        self.epoll.add(fd, READABLE, 0).map_err(|e| entry::code(&e))?;
        let mut members = lock(&self.members);
        members.retain(Member::alive);
        members.push(m);
        Ok(())
    }

    /// `fi_wait`: 0 once a member has something, `-FI_ETIMEDOUT` after
    /// `timeout` ms (negative: none).
    fn wait(&self, timeout: c_int) -> c_int {
        let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            let mut any = false;
            lock(&self.members).retain_mut(|m| match m.ready() {
                Some(r) => {
                    any |= r;
                    true
                }
                None => false,
            });
            if any {
                return 0;
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => MAX_SLEEP,
            };
            if left.is_zero() {
                return -fi::FI_ETIMEDOUT;
            }
            let ms = left.min(MAX_SLEEP).as_millis().max(1) as i32;
            if let Err(e) = self.epoll.wait(&mut [EMPTY_EVENT; 8], ms) {
                return entry::code(&e);
            }
        }
    }
}

/// A wait set object.
pub(crate) struct WaitSetObj(pub(crate) Arc<WaitSetCore>);

impl Core for WaitSetObj {
    type Fid = fi::fid_wait;
    const CLASS: u32 = fi::FI_CLASS_WAIT;
    const MAGIC: u64 = 0x7866_6572_7761_6974; // "xferwait"
}

static WAIT_FID_OPS: fi::fi_ops = entry::ops_with_control(close_wait, control_wait);

static WAIT_OPS: fi::fi_ops_wait = fi::fi_ops_wait {
    size: std::mem::size_of::<fi::fi_ops_wait>(),
    wait: Some(wait),
};

/// `fi_wait_open`: wait objects unspec and fd (`FI_GETWAIT` gives an epoll
/// fd over every member); others `-FI_ENOSYS`.
pub(crate) unsafe extern "C" fn open(
    fabric: *mut fi::fid_fabric,
    attr: *mut fi::fi_wait_attr,
    waitset: *mut *mut fi::fid_wait,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our fabric.
        let Some((fabric, _)) = (unsafe { fabric::get(fabric) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: null or the application's attributes.
        let attr = unsafe { attr.as_ref() }.copied().unwrap_or_default();
        if ![fi::FI_WAIT_UNSPEC, fi::FI_WAIT_FD].contains(&attr.wait_obj) || attr.flags != 0 {
            return -(libc::ENOSYS);
        }
        let epoll = match Epoll::new() {
            Ok(e) => e,
            Err(e) => return entry::code(&e),
        };
        let core = WaitSetCore {
            _fabric: fabric,
            epoll,
            members: Mutex::new(Vec::new()),
        };
        let fid = fi::fid_wait {
            fid: entry::fid(fi::FI_CLASS_WAIT, std::ptr::null_mut(), &WAIT_FID_OPS),
            ops: entry::ops(&WAIT_OPS),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(waitset, fid, WaitSetObj(Arc::new(core))) }
    })
}

/// The wait object of a CQ, counter or EQ opened with `wait_obj`: its own
/// [`Wait`] (none for `FI_WAIT_NONE`) and, for `FI_WAIT_SET`, the set it
/// joins (the caller adds it with [`WaitSetCore::add`] once it exists).
pub(crate) fn object(
    wait_obj: fi::fi_wait_obj,
    wait_set: *mut fi::fid_wait,
) -> Result<(Option<Wait>, Option<Arc<WaitSetCore>>), c_int> {
    if wait_obj != fi::FI_WAIT_SET {
        return Wait::for_object(wait_obj).map(|w| (w, None));
    }
    // SAFETY: FI_WAIT_SET's attribute names a wait set (checked by class and magic).
    let Some(set) = (unsafe { Obj::<WaitSetObj>::get(wait_set.cast()) }).map(|o| o.core.0.clone()) else {
        return Err(-(libc::EINVAL));
    };
    let w = Wait::new().map_err(|e| entry::code(&e))?;
    Ok((Some(w), Some(set)))
}

unsafe extern "C" fn wait(waitset: *mut fi::fid_wait, timeout: c_int) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid_wait.
        match unsafe { Obj::<WaitSetObj>::get(waitset.cast()) } {
            Some(o) => o.core.0.wait(timeout),
            None => -(libc::EINVAL),
        }
    })
}

unsafe extern "C" fn control_wait(fid: *mut fi::fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid.
        let Some(o) = (unsafe { Obj::<WaitSetObj>::get(fid) }) else {
            return -(libc::EINVAL);
        };
        use std::os::fd::AsRawFd;
        match command as u32 {
            // SAFETY: FI_GETWAIT's argument is an int for a wait fd.
            fi::FI_GETWAIT if unsafe { entry::put(arg.cast::<c_int>(), o.core.0.epoll.as_raw_fd()) } => 0,
            // SAFETY: FI_GETWAITOBJ's argument is an enum fi_wait_obj.
            fi::FI_GETWAITOBJ if unsafe { entry::put(arg.cast::<fi::fi_wait_obj>(), fi::FI_WAIT_FD) } => 0,
            fi::FI_GETWAIT | fi::FI_GETWAITOBJ => -(libc::EINVAL),
            _ => -(libc::ENOSYS),
        }
    })
}

unsafe extern "C" fn close_wait(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<WaitSetObj>(fid, |o| Arc::strong_count(&o.0) > 1)
}

/// A poll set's state: its members and the contexts `fi_poll` reports.
pub(crate) struct PollSetCore {
    _domain: Arc<DomainCore>,
    members: Mutex<Vec<(Member, usize)>>,
}

/// A poll set object.
pub(crate) struct PollSetObj(pub(crate) Arc<PollSetCore>);

impl Core for PollSetObj {
    type Fid = fi::fid_poll;
    const CLASS: u32 = fi::FI_CLASS_POLL;
    const MAGIC: u64 = 0x7866_6572_706f_6c6c; // "xferpoll"
}

static POLL_FID_OPS: fi::fi_ops = entry::close_only_ops(close_poll);

static POLL_OPS: fi::fi_ops_poll = fi::fi_ops_poll {
    size: std::mem::size_of::<fi::fi_ops_poll>(),
    poll: Some(poll),
    poll_add: Some(poll_add),
    poll_del: Some(poll_del),
};

/// `fi_poll_open` on a domain.
pub(crate) unsafe extern "C" fn poll_open(
    domain: *mut fi::fid_domain,
    attr: *mut fi::fi_poll_attr,
    pollset: *mut *mut fi::fid_poll,
) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes our domain.
        let Some(domain) = (unsafe { domain::get(domain) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: null or the application's attributes.
        if unsafe { attr.as_ref() }.is_some_and(|a| a.flags != 0) {
            return -(libc::EINVAL);
        }
        let fid = fi::fid_poll {
            fid: entry::fid(fi::FI_CLASS_POLL, std::ptr::null_mut(), &POLL_FID_OPS),
            ops: entry::ops(&POLL_OPS),
        };
        let core = PollSetCore {
            _domain: domain,
            members: Mutex::new(Vec::new()),
        };
        // SAFETY: the application's out pointer.
        unsafe { entry::hand_out(pollset, fid, PollSetObj(Arc::new(core))) }
    })
}

fn with_poll(pollset: *mut fi::fid_poll, f: impl FnOnce(&PollSetCore) -> c_int) -> c_int {
    guard(PANIC, || {
        // SAFETY: libfabric passes the application's fid_poll.
        match unsafe { Obj::<PollSetObj>::get(pollset.cast()) } {
            Some(o) => f(&o.core.0),
            None => -(libc::EINVAL),
        }
    })
}

/// `fi_poll`: the contexts (given at their open) of up to `count` members
/// with something to read, after driving their endpoints; never waits.
unsafe extern "C" fn poll(pollset: *mut fi::fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    with_poll(pollset, |ps| {
        if count < 0 || (count > 0 && context.is_null()) {
            return -(libc::EINVAL);
        }
        let mut n = 0;
        lock(&ps.members).retain_mut(|(m, ctx)| match m.ready() {
            Some(ready) => {
                if ready && n < count {
                    // SAFETY: the caller's array holds `count` pointers; n < count.
                    unsafe { context.add(n as usize).write(*ctx as *mut c_void) };
                    n += 1;
                }
                true
            }
            None => false,
        });
        n
    })
}

/// `fi_poll_add`: a CQ or counter of the domain (`-FI_EINVAL` otherwise).
unsafe extern "C" fn poll_add(pollset: *mut fi::fid_poll, event_fid: *mut fi::fid, _flags: u64) -> c_int {
    with_poll(pollset, |ps| {
        // SAFETY: libfabric passes the application's fid.
        let class = unsafe { event_fid.as_ref() }.map(|f| f.fclass as u32);
        if !matches!(class, Some(fi::FI_CLASS_CQ | fi::FI_CLASS_CNTR)) {
            return -(libc::EINVAL);
        }
        // SAFETY: as above (checked non-null).
        let Some(m) = (unsafe { member_of(event_fid) }) else {
            return -(libc::EINVAL);
        };
        // SAFETY: a live fid; its context is what fi_poll reports.
        let ctx = unsafe { (*event_fid).context } as usize;
        lock(&ps.members).push((m, ctx));
        0
    })
}

/// `fi_poll_del`: removes a member (`-FI_EINVAL` when it is not one).
unsafe extern "C" fn poll_del(pollset: *mut fi::fid_poll, event_fid: *mut fi::fid, _flags: u64) -> c_int {
    with_poll(pollset, |ps| {
        // SAFETY: libfabric passes the application's fid.
        let Some(m) = (unsafe { member_of(event_fid) }) else {
            return -(libc::EINVAL);
        };
        let target = match &m {
            Member::Cq(w) => w.as_ptr().cast::<c_void>(),
            Member::Cntr(w, _) => w.as_ptr().cast(),
            Member::Eq(w) => w.as_ptr().cast(),
        };
        let mut members = lock(&ps.members);
        let before = members.len();
        members.retain(|(m, _)| !m.is(target));
        match members.len() < before {
            true => 0,
            false => -(libc::EINVAL),
        }
    })
}

unsafe extern "C" fn close_poll(fid: *mut fi::fid) -> c_int {
    entry::close_unless_used::<PollSetObj>(fid, |_| false)
}
