//! The control channel: short tagged text messages between client and server
//! (hello with the client's name, phase descriptions, ready, done).

use xfer::{Endpoint, PeerAddr};

use crate::driver::{self, Driver, Result};

/// Tag of control messages; data messages never use it.
pub const CTRL_TAG: u64 = 0xffff_0000_0000_0001;
/// Tag of bandwidth acknowledgements.
pub const ACK_TAG: u64 = 0xffff_0000_0000_0002;
/// Tag of benchmark data in tagged tests.
pub const DATA_TAG: u64 = 0x10;

/// Completion contexts.
pub const SEND: u64 = 1;
pub const RECV: u64 = 2;
pub const ACK: u64 = 3;
const CTRL_SEND: u64 = 4;
const CTRL_RECV: u64 = 5;

const CTRL_MAX: usize = 256;

/// Sends `text` and waits until it is handed to the transport.
pub fn say(ep: &Endpoint, d: &mut Driver, peer: PeerAddr, text: &str) -> Result<()> {
    driver::send(ep, true, peer, CTRL_TAG, text.as_bytes().to_vec(), CTRL_SEND)?;
    expect(d, CTRL_SEND, "sending a control message").map(drop)
}

/// Waits for the next control message from `peer` (any peer: `UNSPEC`).
pub fn hear(ep: &Endpoint, d: &mut Driver, peer: PeerAddr) -> Result<String> {
    driver::recv(ep, true, peer, CTRL_TAG, vec![0; CTRL_MAX], CTRL_RECV)?;
    let mut c = expect(d, CTRL_RECV, "waiting for a control message")?;
    let mut text = driver::buf(&mut c)?;
    text.truncate(c.len);
    String::from_utf8(text).map_err(|_| "control message is not text".to_string())
}

/// The next completion, which must have context `ctx`: control messages are
/// only exchanged when nothing else is in flight.
fn expect(d: &mut Driver, ctx: u64, what: &str) -> Result<xfer::Completion> {
    let c = d.next(what)?;
    if c.context != ctx {
        return Err(format!("{what}: unexpected completion {} (wanted {ctx})", c.context));
    }
    Ok(std::mem::take(c))
}
