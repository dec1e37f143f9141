//! What each arriving frame does. Runs while the transport reports, so it
//! never calls the transport: answers are queued, pulls of matched
//! rendezvous requests and connection ends are done right after.

use crate::complete::{self, Arrival};
use crate::provider::Ctx;

use super::super::credit::cost;
use super::super::rndv::{Answer, Next};
use super::super::transport::{Bytes, Cause, ConnId, Event, Events};
use super::super::Unexpected;
use super::credit::charge_entry;
use super::out::Out;
use super::peers::Peers;
use super::wire::{self, Header, Kind};
use super::{Pull, Rts, State};

/// The engine's side of one `Transport::progress`.
pub struct Handler<'s, 'c, 'a> {
    pub s: &'s mut State,
    pub cx: &'c mut Ctx<'a>,
}

impl Events for Handler<'_, '_, '_> {
    fn ready(&mut self, conn: ConnId) -> bool {
        // A connection to be closed is not read further.
        self.s.doomed.is_empty() || !self.s.doomed.iter().any(|&(c, _)| c == conn)
    }

    fn event(&mut self, ev: Event<'_>) {
        self.s.motion += 1;
        match ev {
            Event::Up { conn } => match self.s.peers.link_of(conn) {
                None => self.s.peers.link(conn, None),
                Some(l) => {
                    if let Some(p) = l.peer {
                        self.s.joined(p, self.cx.av);
                    }
                }
            },
            Event::Frame { conn, header, payload } => {
                let mut h = [0u8; wire::LEN];
                let parsed = match wire::carried(header.len()) {
                    true => {
                        header.copy_to(&mut h);
                        Header::parse(&h)
                    }
                    false => Err(crate::error::Error::Protocol("frame header of the wrong length")),
                };
                let r = match parsed {
                    Ok(h) => self.frame(conn, h, payload),
                    Err(crate::error::Error::Protocol(what)) => Err(what),
                    Err(_) => Err("bad frame header"),
                };
                if let Err(what) = r {
                    self.s.doomed.push((conn, Cause::Protocol(what)));
                }
            }
            Event::Down { conn, cause } => self.s.lost(conn, cause),
            Event::Pulled { token, result } => self.s.pulled(token, result, self.cx),
            Event::Accessed { token, result } => self.s.accessed(token, result, self.cx),
            Event::Fetched { token, result } => self.s.fetched(token, result, self.cx),
        }
    }
}

impl Handler<'_, '_, '_> {
    fn frame(&mut self, conn: ConnId, h: Header, payload: Bytes<'_>) -> Result<(), &'static str> {
        let link = self.s.peers.link_of(conn);
        let Some(p) = link.and_then(|l| l.peer) else {
            return self.s.unowned(self.cx.av, conn, h, payload);
        };
        if h.kind == Kind::Eager {
            // Most frames: handled before the look-ups the other kinds
            // share, which it makes once itself.
            return self.eager(p, h, payload);
        }
        let at = self.s.serial(p);
        if let Some(e) = self.s.peers.get_mut(p) {
            e.silence.heard();
        }
        match h.kind {
            Kind::Hello => Err("a second hello"),
            Kind::Challenge => self.s.challenged(p, payload),
            Kind::Admitted => self.s.admitted_by(p, payload),
            Kind::Proof => Err("proof out of place"),
            Kind::Ping => {
                self.s
                    .enqueue(p, 0, Out::Owned(Header::new(Kind::Pong).encode(), Vec::new()));
                Ok(())
            }
            Kind::Pong => Ok(()),
            Kind::Eager => self.eager(p, h, payload), // taken above
            Kind::Rts => {
                self.s.charge(p, cost(0))?;
                self.rts(conn, p, at, h);
                Ok(())
            }
            Kind::Credit => self.s.granted(p, h.len),
            Kind::Fin | Kind::Delivered | Kind::Cts => self.answer(at, h),
            Kind::RmaWrite => self.s.on_write(self.cx, p, h, payload),
            Kind::RmaRead => {
                self.s.on_read(self.cx, p, h);
                Ok(())
            }
            Kind::RmaData => self.s.on_read_data(at, h, payload),
            Kind::RmaDone => self.s.on_rma_done(self.cx, at, h),
            Kind::Atomic => {
                self.s.on_atomic(self.cx, p, h);
                Ok(())
            }
            Kind::AtomicDone => self.s.on_atomic_done(self.cx, at, h),
            Kind::Data => {
                let key = self.s.pushes.key_of(h.token).filter(|&k| self.s.pushes[k].peer == at);
                let key = key.ok_or("pushed bytes for no receive waiting for them")?;
                let off = usize::try_from(h.off).map_err(|_| "pushed bytes past the message")?;
                let olen = self.s.pushes[key].arrival.olen;
                if off.checked_add(payload.len()).is_none_or(|end| end > olen) {
                    return Err("pushed bytes past the message");
                }
                if h.flags & wire::LAST != 0 {
                    if !payload.is_empty() {
                        return Err("a push's end with bytes");
                    }
                    return self.s.push_stopped(key);
                }
                self.s.pushed(self.cx, key, off, payload);
                Ok(())
            }
        }
    }

    /// An eager message from peer `p`: the most common frame, so its peer
    /// entry is looked up once for the credit, the source handle, the
    /// sender's name and the credit owed back.
    fn eager(&mut self, p: usize, h: Header, payload: Bytes<'_>) -> Result<(), &'static str> {
        let s = &mut *self.s;
        let cost = cost(payload.len() as u64);
        let Some(e) = s.peers.get_mut(p) else {
            return Err("a message on a connection whose peer is gone");
        };
        e.silence.heard();
        charge_entry(e, &mut s.counted.credit_violations, cost)?;
        let at = (p, e.serial);
        let src = Peers::handle_of(e, self.cx.av);
        let tagged = h.tag().is_some();
        let tag = h.tag().unwrap_or(0);
        match s.rx.take_posted(tagged, src, tag) {
            Some((_, mut op)) => {
                let n = payload.copy_to(op.buf.as_mut_slice());
                let a = Arrival {
                    len: n,
                    olen: payload.len(),
                    tag,
                    data: h.data(),
                    src,
                };
                complete::recv_from(&mut self.cx.cq, op, a, &e.name, s.source_err);
                if e.credit.owe(cost, 0) {
                    s.give_back(p);
                }
            }
            None => {
                e.share.hold(cost);
                let msg = Unexpected::Eager {
                    from: e.name,
                    conn: at,
                    data: h.data(),
                    payload: payload.to_vec(),
                };
                s.rx.arrive(tagged, src, tag, msg);
            }
        }
        if h.flags & wire::ACK != 0 {
            let mut done = Header::new(Kind::Delivered);
            done.token = h.token;
            s.enqueue(p, 0, Out::Owned(done.encode(), Vec::new()));
        }
        Ok(())
    }

    fn rts(&mut self, conn: ConnId, p: usize, at: (usize, u64), h: Header) {
        let src = self.s.peers.handle(p, self.cx.av);
        let tagged = h.tag().is_some();
        let tag = h.tag().unwrap_or(0);
        let from = self.s.peers.get(p).map_or(self.s.name, |e| e.name);
        let rts = Rts {
            peer: at,
            conn,
            token: h.token,
            addr: h.addr,
            key: h.key(),
        };
        let olen = usize::try_from(h.len).unwrap_or(usize::MAX);
        match self.s.rx.take_posted(tagged, src, tag) {
            Some((_, op)) => {
                self.s.consumed(at, cost(0), false);
                let arrival = Arrival {
                    len: 0,
                    olen,
                    tag,
                    data: h.data(),
                    src,
                };
                self.s.pulls.push(Pull {
                    op,
                    peer: at,
                    arrival,
                    from,
                    rts,
                    ended: None,
                    rest: None,
                });
            }
            None => {
                self.s.hold(p, cost(0));
                let msg = Unexpected::Rts {
                    from,
                    len: h.len,
                    data: h.data(),
                    handle: rts,
                };
                self.s.rx.arrive(tagged, src, tag, msg);
            }
        }
    }

    /// A receiver's answer to one of our sends: finish, delivered, or clear
    /// to push.
    fn answer(&mut self, at: (usize, u64), h: Header) -> Result<(), &'static str> {
        let answer = match h.kind {
            Kind::Fin => Answer::Finish,
            Kind::Delivered => Answer::Delivered,
            _ => Answer::Clear,
        };
        let unexpected = || match answer.unexpected() {
            crate::error::Error::Protocol(what) => what,
            _ => "unexpected answer",
        };
        let key = self.s.sends.key_of(h.token).filter(|&k| self.s.sends[k].peer == at);
        let key = key.ok_or_else(unexpected)?;
        let next = self.s.sends[key].state.answer(answer).map_err(|_| unexpected())?;
        match next {
            Next::Move => {
                self.s.sends[key].pushed_to = h.addr;
                self.s.enqueue(
                    at.0,
                    0,
                    Out::Push {
                        send: h.token,
                        to: h.addr,
                        off: 0,
                    },
                );
            }
            Next::Wait => {}
            Next::Complete | Next::Stop => {
                let send = self.s.sends.remove(key);
                self.s.concealed.extend(send.exposed);
                let result = match h.status {
                    wire::status::TAKEN => Ok(()),
                    wire::status::CANCELED => Err(crate::error::Error::Canceled),
                    _ => Err(crate::error::Error::Protocol("the receiver could not read the payload")),
                };
                if next == Next::Stop {
                    // The receiver pulled the rest of our push: what is
                    // still queued of it goes no more (its entry names a
                    // send that is over), and this frame, behind every
                    // pushed one, tells the receiver none will follow.
                    let mut end = Header::new(Kind::Data);
                    end.flags = wire::LAST;
                    end.token = send.pushed_to;
                    end.off = send.op.buf.len() as u64;
                    self.s.enqueue(at.0, 0, Out::Owned(end.encode(), Vec::new()));
                }
                complete::send(&mut self.cx.cq, self.s.selective, send.op, result);
            }
        }
        Ok(())
    }
}
