//! The buffers of a streaming window.
//!
//! By default every message of a window goes from one send buffer into one
//! receive buffer, as `ucx_perftest` and perftest's `ib_send_bw` do: the
//! figure then measures the transport, not the memory system (64 distinct
//! 1 MiB buffers on each side do not fit in a 32 MiB last-level cache, and
//! every copy would come from DRAM). Those operations use raw buffers, so
//! several are in flight on the same memory at once; concurrent receives into
//! one buffer leave it holding one of the messages, and every message carries
//! the same pattern. `--buffers per-op` instead gives each operation its own
//! buffer through the safe API, as an application that owns its messages
//! would run.

use xfer::{Buffer, Completion, Endpoint, PeerAddr, RecvOp, RecvSpec, RemoteKey, RmaKind, RmaOp, SendOp};

use crate::driver::Result;

/// Where a window's buffers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffers {
    /// One buffer per side, shared by every operation in flight.
    Shared,
    /// One owned buffer per operation (the safe API).
    PerOp,
}

impl Buffers {
    pub fn name(self) -> &'static str {
        match self {
            Buffers::Shared => "shared",
            Buffers::PerOp => "per-op",
        }
    }

    pub fn parse(s: &str) -> std::result::Result<Buffers, String> {
        match s {
            "shared" => Ok(Buffers::Shared),
            "per-op" => Ok(Buffers::PerOp),
            _ => Err(format!("unknown buffer mode {s:?} (shared or per-op)")),
        }
    }
}

/// The buffers of one side of a streaming phase.
pub struct Pool {
    mode: Buffers,
    /// The shared buffer; never resized while operations are in flight.
    shared: Vec<u8>,
    /// Per-operation buffers not in flight.
    spare: Vec<Vec<u8>>,
    /// Operations posted and not yet completed.
    in_flight: usize,
}

impl Pool {
    /// Buffers for windows of `window` operations, each holding `fill`.
    pub fn new(mode: Buffers, window: usize, fill: Vec<u8>) -> Pool {
        let (shared, spare) = match mode {
            Buffers::Shared => (fill, Vec::new()),
            Buffers::PerOp => (Vec::new(), vec![fill; window]),
        };
        Pool {
            mode,
            shared,
            spare,
            in_flight: 0,
        }
    }

    fn next(&mut self, size: usize) -> Buffer {
        self.in_flight += 1;
        match self.mode {
            // SAFETY: `shared` is neither resized nor freed while operations
            // are in flight (`Drop` leaks it if any still are), and
            // `complete` shows it only when none is. Operations in flight
            // together only read it (sends) or only write it (receives,
            // whose contents are then unspecified, as with libfabric or UCX).
            Buffers::Shared => unsafe { Buffer::raw(self.shared.as_mut_ptr(), self.shared.len()) },
            Buffers::PerOp => self.spare.pop().unwrap_or_else(|| vec![0; size]).into(),
        }
    }

    /// Posts a send of the next buffer.
    pub fn send(&mut self, ep: &Endpoint, tag: Option<u64>, peer: PeerAddr, ctx: u64, size: usize) -> Result<()> {
        let op = SendOp {
            peer,
            tag,
            data: None,
            buf: self.next(size),
            context: ctx,
            completion: true,
            level: Default::default(),
        };
        ep.post_send(op).map_err(|r| {
            self.in_flight -= 1;
            format!("posting a send: {}", r.error)
        })
    }

    /// Posts a receive into the next buffer (tag matched exactly).
    pub fn recv(&mut self, ep: &Endpoint, tag: Option<u64>, src: PeerAddr, ctx: u64, size: usize) -> Result<()> {
        let op = RecvOp {
            spec: RecvSpec {
                src,
                tag: tag.unwrap_or(0),
                ignore: 0,
            },
            tagged: tag.is_some(),
            buf: self.next(size),
            context: ctx,
        };
        ep.post_recv(op).map_err(|r| {
            self.in_flight -= 1;
            format!("posting a receive: {}", r.error)
        })
    }

    /// Posts an RMA write from, or read into, the next buffer, at the start
    /// of the remote region `theirs`.
    pub fn rma(
        &mut self,
        ep: &Endpoint,
        kind: RmaKind,
        peer: PeerAddr,
        theirs: &RemoteKey,
        ctx: u64,
        size: usize,
    ) -> Result<()> {
        let addr = ep.remote_addr(theirs, 0).map_err(|e| format!("remote address: {e}"))?;
        let op = RmaOp {
            peer,
            kind,
            buf: self.next(size),
            addr,
            key: theirs.key(),
            data: None,
            context: ctx,
            completion: true,
        };
        ep.post_rma(op).map_err(|r| {
            self.in_flight -= 1;
            format!("posting an RMA operation: {}", r.error)
        })
    }

    /// Takes back the buffer of a completed operation; returns the bytes it
    /// now holds: the operation's own, or the shared buffer once no operation
    /// on it is in flight (None before: the transport may still write it).
    pub fn complete(&mut self, c: &mut Completion) -> Result<Option<&[u8]>> {
        self.in_flight = self.in_flight.saturating_sub(1);
        match self.mode {
            Buffers::Shared => Ok((self.in_flight == 0).then_some(&self.shared[..])),
            Buffers::PerOp => {
                let b = c
                    .buf
                    .take()
                    .ok_or_else(|| format!("completion {} carried no buffer", c.context))?;
                self.spare.push(b);
                Ok(self.spare.last().map(|b| &b[..]))
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if self.in_flight > 0 && self.mode == Buffers::Shared {
            // A phase that failed with operations in flight: the transport
            // may still use the memory until the endpoint closes.
            std::mem::forget(std::mem::take(&mut self.shared));
        }
    }
}
