//! The reliable-messaging (RDM) layer every transport shares, in libfabric's
//! util/rxm and UCX's UCP role: what the user's operations mean, whichever
//! transport moves the bytes. It moves into core one piece at a time
//! (docs/ARCHITECTURE.md, "Layers"); what is here is written once and used by
//! every provider.
//!
//! - [`Receives`]: an endpoint's posted and unexpected receives, tagged and
//!   untagged, their matching in post order, peek/claim and cancel, and what
//!   the unexpected ones hold ([`Held`]).
//! - [`Unexpected`]: a message kept for a later receive, the same on every
//!   transport but for its rendezvous handle.
//! - [`credit`]: eager credit's unit, what one message costs its sender, and
//!   [`Credit`], one connection's credit both ways.
//! - [`crossing`]: which connection survives a crossed first contact.
//! - [`Requests`]: a connection's requests to send waiting unmatched.
//! - [`rndv`]: the eager/rendezvous choice and the rendezvous sender's
//!   state machine ([`SendState`]), whatever moves the bytes.
//! - [`Outstanding`]: operations waiting on a peer (rendezvous sends and
//!   receives, RMA), named on the wire by tokens that never name a later
//!   operation; [`Abandoned`]: answers still owed to failed ones.
//! - [`Account`]/[`Share`]: the receive memory, and a connection's part of it.
//! - [`Counters`]: what the layer counts, under one set of names.
//! - [`admit`]: the job key's challenge and proof (admission).
//! - [`stall`]: the progress timeout's bookkeeping (peers alive but stalled).
//! - [`transport`]: what a transport under the layer provides, and
//!   [`engine`]: the layer written once over it (an endpoint provider).

pub mod abandoned;
pub mod account;
pub mod admit;
pub mod counters;
pub mod credit;
pub mod crossing;
pub mod engine;
pub mod outstanding;
pub mod pair;
pub mod receives;
pub mod requests;
pub mod rndv;
pub mod stall;
pub mod transport;
pub mod unexpected;

pub use abandoned::Abandoned;
pub use account::{Account, Share};
pub use counters::Counters;
pub use credit::{Amount, Credit};
pub use outstanding::Outstanding;
pub use receives::{Dropped, Receives};
pub use requests::Requests;
pub use rndv::{Protocol, SendState};
pub use unexpected::{Held, Unexpected};
