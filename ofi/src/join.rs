//! RMA over several remote segments (`fi_writemsg`/`fi_readmsg` with
//! `rma_iov_count` up to [`RMA_IOV_LIMIT`]): xfer's RMA names one remote
//! range, so the plug-in posts one xfer operation per segment, each with a
//! token ([`JOIN`]) for its context, and the completion router reports the
//! application's one completion when the last part completed: with the
//! first error of any part, or success and the total length.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use xfer_core::unstable::hash::FastMap;
use xfer_facade::{Completion, Error};

use crate::entry::lock;

/// Remote segments an RMA operation takes (`tx_attr->rma_iov_limit`).
pub const RMA_IOV_LIMIT: usize = 4;

/// The bit of an xfer context that names a part of a joined operation (a
/// token of [`Joins`]).
pub(crate) const JOIN: u64 = 1 << 60;

/// An operation posted as several parts.
struct Join {
    /// The context its completion reports (the application's, or a
    /// staging token the router then unstages).
    context: u64,
    /// Parts not completed yet.
    left: usize,
    /// Bytes the completed parts moved.
    len: usize,
    /// The first part's error.
    error: Option<Error>,
}

/// An endpoint's joined operations, by token.
#[derive(Default)]
pub(crate) struct Joins {
    next: AtomicU64,
    live: Mutex<FastMap<u64, Join>>,
}

impl Joins {
    /// Starts an operation of `parts` parts reporting `context`: the token
    /// each part is posted with.
    pub(crate) fn start(&self, context: u64, parts: usize) -> u64 {
        let token = JOIN | (self.next.fetch_add(1, Ordering::Relaxed) & (JOIN - 1));
        let j = Join {
            context,
            left: parts,
            len: 0,
            error: None,
        };
        lock(&self.live).insert(token, j);
        token
    }

    /// Parts of `token` that will never complete (their post failed after
    /// others were posted): the operation fails with `error`. Returns
    /// whether parts are still out (false: nothing was posted, forget it).
    pub(crate) fn unposted(&self, token: u64, parts: usize, error: Error) -> bool {
        let mut live = lock(&self.live);
        let Some(j) = live.get_mut(&token) else { return false };
        j.left = j.left.saturating_sub(parts);
        j.error.get_or_insert(error);
        if j.left == 0 {
            live.remove(&token);
            return false;
        }
        true
    }

    /// A part of `c.context` completed: `None` when the context is no
    /// token of ours (an application context that has the bit), else the
    /// operation's completion once this was its last part.
    pub(crate) fn part(&self, c: &Completion) -> Option<Option<Completion>> {
        let mut live = lock(&self.live);
        let j = live.get_mut(&c.context)?;
        j.left = j.left.saturating_sub(1);
        match &c.result {
            Ok(()) => j.len += c.len,
            Err(e) => {
                j.error.get_or_insert_with(|| e.clone());
            }
        }
        if j.left > 0 {
            return Some(None);
        }
        let j = live.remove(&c.context)?;
        let mut done = Completion::EMPTY;
        done.context = j.context;
        done.flags = c.flags;
        done.len = j.len;
        done.src = c.src;
        done.result = j.error.map_or(Ok(()), Err);
        Some(Some(done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xfer_facade::{Flags, PeerAddr};

    fn part(context: u64, len: usize, result: Result<(), Error>) -> Completion {
        let mut c = Completion::EMPTY;
        c.context = context;
        c.flags = Flags::RMA | Flags::WRITE;
        c.len = len;
        c.src = PeerAddr(3);
        c.result = result;
        c
    }

    #[test]
    fn the_last_part_completes_the_operation_with_the_first_error() {
        let j = Joins::default();
        let t = j.start(77, 3);
        assert!(t & JOIN != 0);
        assert_eq!(j.part(&part(t, 10, Ok(()))), Some(None));
        assert_eq!(j.part(&part(t, 0, Err(Error::RemoteAccess("key")))), Some(None));
        let done = j
            .part(&part(t, 5, Err(Error::Canceled)))
            .flatten()
            .expect("the last part");
        assert_eq!((done.context, done.len, done.src), (77, 10, PeerAddr(3)));
        assert_eq!(done.result, Err(Error::RemoteAccess("key")));
        assert_eq!(j.part(&part(t, 5, Ok(()))), None, "the token is gone");

        let t = j.start(78, 4);
        assert_eq!(j.part(&part(t, 8, Ok(()))), Some(None));
        assert!(j.unposted(t, 2, Error::Canceled), "one part still out");
        let done = j.part(&part(t, 8, Ok(()))).flatten().expect("the last posted part");
        assert_eq!((done.context, done.len), (78, 16));
        assert_eq!(done.result, Err(Error::Canceled));
        let t = j.start(79, 2);
        assert!(!j.unposted(t, 2, Error::Canceled), "nothing posted");
    }
}
