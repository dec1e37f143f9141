//! Peer events (`EndpointAttr::peer_events`): a peer joins when its first
//! connection is open (our Hello acknowledged, or its Hello accepted) and
//! leaves when its last connection ends. A peer is keyed by its IP and port
//! ([`any_form`]), so a connection dialled by an address inserted as
//! `IP:PORT` and one the peer opened to us count as the same peer.

use super::*;

impl TcpEndpoint {
    /// Connection `id` is open with `name` (the peer's full name).
    #[cold]
    pub(super) fn peer_up(&mut self, cx: &mut Ctx<'_>, name: Address) {
        if self.peer_events.enabled() {
            let key = any_form(&name).unwrap_or(name);
            self.peer_events.up(key, name, reverse(cx.av, &name));
        }
    }

    /// A connection with `peer` ended with `cause` (not our own close):
    /// the peer leaves if no other connection with it remains.
    #[cold]
    pub(super) fn peer_down(&mut self, cx: &mut Ctx<'_>, peer: Address, cause: &Error) {
        if !self.peer_events.enabled() || *cause == Error::Canceled {
            return;
        }
        let key = any_form(&peer).unwrap_or(peer);
        let other = self
            .conns
            .iter()
            .any(|(_, c)| c.peer.is_some_and(|p| any_form(&p).unwrap_or(p) == key));
        if !other {
            let src = reverse(cx.av, &peer);
            self.peer_events.down(key, src, op_error(cause, src));
        }
    }
}
