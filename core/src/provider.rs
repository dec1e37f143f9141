//! The traits a provider implements, and the operation descriptors it receives.
//!
//! A provider is thin: it moves bytes and drives its protocol. Core owns the
//! objects users see (completion queues, address vectors), the lock that
//! serialises a domain, and the tag matcher ([`crate::tag::Matcher`]) that
//! providers embed. Every call happens with the domain's lock held, so
//! providers need no locking of their own.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use crate::addr::{Address, AvTable, PeerAddr};
use crate::attr::EndpointAttr;
use crate::buffer::Buffer;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::tag::RecvSpec;

/// A send (message or tagged) handed to a provider.
#[derive(Debug)]
pub struct SendOp {
    /// Destination.
    pub peer: PeerAddr,
    /// `Some(tag)` for a tagged send, `None` for a message send.
    pub tag: Option<u64>,
    /// Immediate data delivered with the receive's completion.
    pub data: Option<u64>,
    /// The payload.
    pub buf: Buffer,
    /// Returned in the completion.
    pub context: u64,
    /// Report success with a completion (errors are always reported).
    pub completion: bool,
}

/// A receive (message or tagged) handed to a provider.
#[derive(Debug)]
pub struct RecvOp {
    /// Which messages it accepts (source, tag, ignore mask).
    pub spec: RecvSpec,
    /// Whether it receives tagged messages (else untagged ones).
    pub tagged: bool,
    /// Where the message lands.
    pub buf: Buffer,
    /// Returned in the completion.
    pub context: u64,
}

/// An operation the provider refused, handed back with its buffer so no data
/// is lost.
#[derive(Debug)]
pub struct Rejected<T> {
    /// Why it was refused.
    pub error: Error,
    /// The operation, unchanged.
    pub op: T,
}

impl<T> Rejected<T> {
    /// Pairs an error with the refused operation.
    pub fn new(error: Error, op: T) -> Self {
        Rejected { error, op }
    }
}

/// What a provider may touch during a call: the completion ring of the
/// endpoint's queue and the endpoint's address vector.
pub struct Ctx<'a> {
    /// Completions produced by this call.
    pub cq: &'a mut VecDeque<Completion>,
    /// The endpoint's address vector.
    pub av: &'a AvTable,
}

/// One provider's domain: opens endpoints and validates names.
pub trait DomainProvider: Send {
    /// The provider's name (`tcp`, `verbs`).
    fn name(&self) -> &'static str;
    /// Checks that `bytes` are an endpoint name of this provider.
    fn check_address(&self, bytes: &[u8]) -> Result<Address>;
    /// Opens an endpoint.
    fn open_endpoint(&mut self, attr: &EndpointAttr) -> Result<Box<dyn EndpointProvider>>;
}

/// One provider's endpoint: reliable, connectionless to the user (RDM).
pub trait EndpointProvider: Send {
    /// The endpoint's name, to be inserted into peers' address vectors.
    fn name(&self) -> Address;
    /// Starts a send. Completions it causes go to `cx.cq`.
    fn send(&mut self, cx: &mut Ctx<'_>, op: SendOp) -> std::result::Result<(), Rejected<SendOp>>;
    /// Copies `payload` and sends it with no completion (`fi_inject`).
    fn inject(
        &mut self,
        cx: &mut Ctx<'_>,
        peer: PeerAddr,
        tag: Option<u64>,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<()>;
    /// Posts a receive.
    fn recv(&mut self, cx: &mut Ctx<'_>, op: RecvOp) -> std::result::Result<(), Rejected<RecvOp>>;
    /// Cancels the posted receive with this context; its completion reports
    /// [`Error::Canceled`]. Fails when no such receive is waiting.
    fn cancel(&mut self, cx: &mut Ctx<'_>, context: u64) -> Result<()>;
    /// Moves data and produces completions; never blocks.
    fn progress(&mut self, cx: &mut Ctx<'_>);
    /// A descriptor that becomes readable when `progress` has work to do.
    fn wait_fd(&self) -> RawFd;
    /// Ends every outstanding operation with a cancelled completion and
    /// releases the endpoint's resources; called once, before drop.
    fn close(&mut self, cx: &mut Ctx<'_>);
}
