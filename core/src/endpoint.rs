//! The endpoint handle: message, tagged and inject operations.

use std::sync::Arc;

use crate::addr::{Address, PeerAddr};
use crate::av::AddressVector;
use crate::cq::CompletionQueue;
use crate::domain::Shared;
use crate::error::{Error, Result};
use crate::provider::{RecvOp, Rejected, SendOp};
use crate::tag::RecvSpec;

/// A reliable, connectionless endpoint (libfabric's `FI_EP_RDM`): peers are
/// handles from its address vector; connections are made on first use.
///
/// Buffers are taken by value and come back in the operation's completion,
/// so the transport never touches memory the program has freed. Dropping the
/// endpoint ends its outstanding operations with [`Error::Canceled`]
/// completions.
pub struct Endpoint {
    shared: Arc<Shared>,
    key: usize,
    cq: CompletionQueue,
    av: AddressVector,
    name: Address,
    fd: std::os::fd::RawFd,
}

impl Endpoint {
    pub(crate) fn new(
        shared: Arc<Shared>,
        key: usize,
        cq: CompletionQueue,
        av: AddressVector,
        name: Address,
        fd: std::os::fd::RawFd,
    ) -> Endpoint {
        Endpoint {
            shared,
            key,
            cq,
            av,
            name,
            fd,
        }
    }

    /// This endpoint's name; peers insert its bytes into their address vector.
    pub fn name(&self) -> Address {
        self.name
    }

    /// The completion queue this endpoint reports to.
    pub fn cq(&self) -> &CompletionQueue {
        &self.cq
    }

    /// The address vector this endpoint resolves peers with.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// Posts a send described in full (tag, immediate data, completion
    /// request, raw buffers). A refused send comes back whole.
    pub fn post_send(&self, op: SendOp) -> std::result::Result<(), Rejected<SendOp>> {
        match self.shared.lock() {
            Ok(mut st) => st.with_ep(self.key, |ep, cx| ep.send(cx, op)),
            Err(e) => Err(Rejected::new(e, op)),
        }
    }

    /// Posts a receive described in full. A refused receive comes back whole.
    pub fn post_recv(&self, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>> {
        match self.shared.lock() {
            Ok(mut st) => st.with_ep(self.key, |ep, cx| ep.recv(cx, op)),
            Err(e) => Err(Rejected::new(e, op)),
        }
    }

    /// Sends `buf` as an untagged message to `peer`.
    pub fn send(&self, peer: PeerAddr, buf: Vec<u8>, context: u64) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let op = SendOp {
            peer,
            tag: None,
            data: None,
            buf: buf.into(),
            context,
            completion: true,
        };
        self.post_send(op).map_err(give_back_send)
    }

    /// Sends `buf` as a message tagged `tag` to `peer`.
    pub fn tsend(
        &self,
        peer: PeerAddr,
        tag: u64,
        buf: Vec<u8>,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let op = SendOp {
            peer,
            tag: Some(tag),
            data: None,
            buf: buf.into(),
            context,
            completion: true,
        };
        self.post_send(op).map_err(give_back_send)
    }

    /// Receives an untagged message from `src` ([`PeerAddr::UNSPEC`]: any
    /// source) into `buf`; the completion's `len` says how much arrived.
    pub fn recv(&self, src: PeerAddr, buf: Vec<u8>, context: u64) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let spec = RecvSpec { src, tag: 0, ignore: 0 };
        let op = RecvOp {
            spec,
            tagged: false,
            buf: buf.into(),
            context,
        };
        self.post_recv(op).map_err(give_back_recv)
    }

    /// Receives a tagged message whose tag equals `tag` in every bit not set
    /// in `ignore`, from `src` ([`PeerAddr::UNSPEC`]: any source).
    pub fn trecv(
        &self,
        src: PeerAddr,
        tag: u64,
        ignore: u64,
        buf: Vec<u8>,
        context: u64,
    ) -> std::result::Result<(), Rejected<Vec<u8>>> {
        let spec = RecvSpec { src, tag, ignore };
        let op = RecvOp {
            spec,
            tagged: true,
            buf: buf.into(),
            context,
        };
        self.post_recv(op).map_err(give_back_recv)
    }

    /// Copies `payload` and sends it untagged; no completion is reported and
    /// `payload` may be reused at once. At most the endpoint's `inject_size`.
    pub fn inject(&self, peer: PeerAddr, payload: &[u8]) -> Result<()> {
        self.shared
            .lock()?
            .with_ep(self.key, |ep, cx| ep.inject(cx, peer, None, None, payload))
    }

    /// Like [`inject`](Self::inject), tagged.
    pub fn tinject(&self, peer: PeerAddr, tag: u64, payload: &[u8]) -> Result<()> {
        self.shared
            .lock()?
            .with_ep(self.key, |ep, cx| ep.inject(cx, peer, Some(tag), None, payload))
    }

    /// Cancels the posted receive whose context is `context`; it completes
    /// with [`Error::Canceled`]. Fails with [`Error::InvalidArgument`] when
    /// no receive with that context is waiting (it may have matched already).
    pub fn cancel(&self, context: u64) -> Result<()> {
        self.shared.lock()?.with_ep(self.key, |ep, cx| ep.cancel(cx, context))
    }
}

fn give_back_send(r: Rejected<SendOp>) -> Rejected<Vec<u8>> {
    Rejected::new(r.error, r.op.buf.into_vec().unwrap_or_default())
}

fn give_back_recv(r: Rejected<RecvOp>) -> Rejected<Vec<u8>> {
    Rejected::new(r.error, r.op.buf.into_vec().unwrap_or_default())
}

impl<T> From<Rejected<T>> for Error {
    fn from(r: Rejected<T>) -> Error {
        r.error
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("name", &self.name).finish()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.cq.unwatch(self.fd);
        let Ok(mut st) = self.shared.lock() else {
            tracing::error!("endpoint dropped with its domain poisoned; resources leak");
            return;
        };
        st.with_ep(self.key, |ep, cx| ep.close(cx));
        st.eps.remove(self.key);
        let cq = self.cq.key();
        st.bound[cq].retain(|&e| e != self.key);
    }
}
