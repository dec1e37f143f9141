//! The mark that proves the device wrote a buffer: rxe (Linux 6.1) reports
//! requests that a QP in the error state never executed as successful, so a
//! successful completion alone does not say that a READ's or an atomic's
//! data landed. The transport writes [`MARK`] where the operation must
//! write, before posting it: bytes that no longer hold it on a successful
//! completion were written by the device, which writes them only with the
//! target's answer. Bytes that still hold it were either not written (a
//! flush reported as success) or written with data equal to the mark; only
//! then is the QP's state asked (`ibv_query_qp`, a system call).
//!
//! An atomic's result slot is the transport's own and holds the whole mark
//! ([`super::atomic`]). A READ's destination is the engine's (a receive's
//! buffer, the user's RMA buffer), handed to the transport until the READ
//! is reported: [`Tail`] marks its last bytes, those the last READ of a
//! pull writes last (a QP executes and completes its READs in order, and a
//! READ's response packets land in order), and puts back what they held if
//! the pull fails with the mark still there, so the mark is never seen.

/// What a marked word holds until the device writes it: an arbitrary value,
/// unlikely as data (data equal to it costs its completion a query of the
/// QP's state, nothing more).
pub const MARK: u64 = 0x9e37_79b9_7f4a_7c15;

/// The mark's bytes, in memory order.
const MARK_BYTES: [u8; 8] = MARK.to_le_bytes();

/// The last (up to 8) bytes of a READ's destination, marked, with what they
/// held before.
#[derive(Clone, Copy, Debug)]
pub struct Tail {
    /// Where the marked bytes start (an address: the pull that holds the
    /// tail moves between threads with its transport).
    at: usize,
    len: usize,
    saved: [u8; 8],
}

impl Tail {
    /// Marks the last `min(8, len)` bytes of `chunk..chunk + len` with as
    /// many of the mark's last bytes (a message that ends in the whole mark
    /// ends in them however it is cut into READs), keeping what they held.
    ///
    /// # Safety
    /// `chunk..chunk + len` is valid for reads and writes, and no one but the
    /// device (through the READ about to be posted there) touches it until
    /// the tail is dropped, or [`restore`](Self::restore)d.
    pub unsafe fn mark(chunk: *mut u8, len: usize) -> Tail {
        let n = len.min(MARK_BYTES.len());
        let mut saved = [0; 8];
        // SAFETY: the caller's; `len - n .. len` is inside the chunk.
        let at = unsafe { chunk.add(len - n) };
        // SAFETY: `at..at + n` is valid (the caller's contract), and `saved`
        // and the mark are our own, n <= 8 bytes long.
        unsafe {
            std::ptr::copy_nonoverlapping(at, saved.as_mut_ptr(), n);
            std::ptr::copy_nonoverlapping(Self::mark_of(n).as_ptr(), at, n);
        }
        Tail {
            at: at as usize,
            len: n,
            saved,
        }
    }

    /// The mark of a tail of `n` bytes.
    fn mark_of(n: usize) -> &'static [u8] {
        &MARK_BYTES[MARK_BYTES.len() - n..]
    }

    /// Whether the bytes no longer hold the mark: written since (by the
    /// device: no one else touches them).
    pub fn written(&self) -> bool {
        Self::mark_of(self.len).iter().enumerate().any(|(i, &m)| {
            // SAFETY: in bounds (`mark`'s contract); volatile, as the device
            // writes them behind the compiler's back.
            unsafe { std::ptr::read_volatile((self.at as *const u8).add(i)) != m }
        })
    }

    /// Puts back what the bytes held, unless they were written since: the
    /// operation failed, and its buffer keeps no trace of the mark. Only
    /// once the device can write them no more (every READ of the pull
    /// completed, or its QP destroyed).
    pub fn restore(&self) {
        if !self.written() {
            // SAFETY: `at..at + len` is valid and ours (`mark`'s contract);
            // the device writes it no more (this function's condition).
            unsafe { std::ptr::copy_nonoverlapping(self.saved.as_ptr(), self.at as *mut u8, self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_is_written_when_any_of_its_bytes_changed_and_restores_only_an_unwritten_one() {
        for len in [1, 3, 7, 8, 9, 64] {
            let mut buf: Vec<u8> = (0..len as u8).map(|i| i ^ 0x5a).collect();
            let before = buf.clone();
            // SAFETY: `buf` is ours and only this test touches it.
            let tail = unsafe { Tail::mark(buf.as_mut_ptr(), len) };
            let n = len.min(8);
            assert_eq!(buf[len - n..], MARK_BYTES[8 - n..], "{len}: marked");
            assert_eq!(buf[..len - n], before[..len - n], "{len}: the rest untouched");
            assert!(!tail.written(), "{len}");
            tail.restore();
            assert_eq!(buf, before, "{len}: restored");
            // SAFETY: as above.
            let tail = unsafe { Tail::mark(buf.as_mut_ptr(), len) };
            buf[len - 1] = 0;
            assert!(tail.written(), "{len}: its last byte written");
            tail.restore();
            assert_eq!(buf[len - 1], 0, "{len}: written data kept");
            if n > 1 {
                // SAFETY: as above.
                let tail = unsafe { Tail::mark(buf.as_mut_ptr(), len) };
                buf[len - n] ^= 1;
                assert!(tail.written(), "{len}: its first byte written");
            }
        }
    }
}
