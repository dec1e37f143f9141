//! The eager/rendezvous choice and the rendezvous sender's state machine,
//! whatever moves the bytes.
//!
//! A message goes eager (header and payload in one frame, into the
//! receiver's unexpected store if no receive waits) when it is at most the
//! transport's eager size and its receiver has credit for it; otherwise it
//! goes by rendezvous: a request to send, which costs the receiver only an
//! unexpected entry, and the payload once a receive matches it. How the
//! payload then moves is the transport's: pushed after a clear-to-send
//! (TCP streams it), or pulled by the receiver, which finishes the
//! rendezvous when it has it (verbs reads it with RDMA READ, shared memory
//! copies it). A receiver that can pull may ask for the push first and
//! pull the rest if the push stalls: its finish then stops the push.
//!
//! [`SendState`] is where a send stands with its receiver; every answer a
//! peer gives about it goes through [`SendState::answer`], which refuses
//! (as a protocol violation) an answer the send cannot take in its state.

use crate::error::{Error, Result};

/// How a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Header and payload in one frame.
    Eager,
    /// A request to send; the payload once a receive matches it.
    Rendezvous,
}

/// The protocol for a `len`-byte message on a transport whose eager
/// messages carry at most `eager_max` bytes; `credit` spends the receiver's
/// eager credit for it and says whether there was enough (it is asked only
/// for a message that fits).
#[inline]
pub fn choose(len: usize, eager_max: usize, credit: impl FnOnce() -> bool) -> Protocol {
    if len <= eager_max && credit() {
        Protocol::Eager
    } else {
        Protocol::Rendezvous
    }
}

/// Where a send stands with its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendState {
    /// Its request to send went out: the receiver clears it (push) or pulls
    /// the payload and finishes it (pull).
    Requested,
    /// Eager: its payload is being written.
    Moving,
    /// Its payload went out whole; it waits for the receiver's
    /// acknowledgement (a completion level above inject).
    Moved,
    /// Cleared: its payload is being pushed. A receiver that can also pull
    /// may take the rest itself and finish it early.
    Pushing,
    /// Pushed whole: it waits for the receiver's acknowledgement, or for
    /// the finish of a receiver that pulled the rest before the last
    /// pushed bytes reached it.
    Pushed,
}

/// What a peer says about one of our sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Clear to send (push transports): a receive matched the request.
    Clear,
    /// The receiver pulled the payload (pull transports): the send is done.
    Finish,
    /// The receiver has the message (an acknowledged send): it is done.
    Delivered,
}

impl Answer {
    /// The protocol violation of this answer for no send waiting for it.
    pub fn unexpected(self) -> Error {
        Error::Protocol(match self {
            Answer::Clear => "clear-to-send for no pending rendezvous",
            Answer::Finish => "finish for no pending rendezvous",
            Answer::Delivered => "delivery acknowledgement for no send waiting for one",
        })
    }
}

/// What a send does after an answer or after its payload went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Write the payload.
    Move,
    /// Wait for the receiver's acknowledgement.
    Wait,
    /// Complete the send.
    Complete,
    /// The receiver pulled what it lacked of a push: complete the send,
    /// push nothing more, and tell the receiver so.
    Stop,
}

impl SendState {
    /// The state a send starts in, by its protocol.
    pub fn start(protocol: Protocol) -> SendState {
        match protocol {
            Protocol::Eager => SendState::Moving,
            Protocol::Rendezvous => SendState::Requested,
        }
    }

    /// Takes the peer's `answer`, or refuses it as a protocol violation
    /// when the send cannot take it in its state.
    pub fn answer(&mut self, answer: Answer) -> Result<Next> {
        match (*self, answer) {
            (SendState::Requested, Answer::Clear) => {
                *self = SendState::Pushing;
                Ok(Next::Move)
            }
            (SendState::Requested, Answer::Finish) | (SendState::Moved | SendState::Pushed, Answer::Delivered) => {
                Ok(Next::Complete)
            }
            (SendState::Pushing | SendState::Pushed, Answer::Finish) => Ok(Next::Stop),
            (_, answer) => Err(answer.unexpected()),
        }
    }

    /// Its payload went out whole; `acknowledged`: the receiver will say
    /// when it has the message.
    pub fn moved(&mut self, acknowledged: bool) -> Next {
        if !acknowledged {
            return Next::Complete;
        }
        *self = match *self {
            SendState::Pushing | SendState::Pushed => SendState::Pushed,
            _ => SendState::Moved,
        };
        Next::Wait
    }

    /// The answer a send that failed in this state may still get from its
    /// receiver, over another connection to it: its request or its payload
    /// went out whole. Only push transports, whose answers may take another
    /// connection, keep such answers ([`super::Abandoned`]).
    pub fn owed(self) -> Option<Answer> {
        match self {
            SendState::Requested => Some(Answer::Clear),
            SendState::Moved | SendState::Pushed => Some(Answer::Delivered),
            SendState::Moving | SendState::Pushing => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choice_spends_credit_only_for_a_message_that_fits() {
        let mut asked = 0;
        assert_eq!(
            choose(100, 64, || {
                asked += 1;
                true
            }),
            Protocol::Rendezvous
        );
        assert_eq!(asked, 0);
        assert_eq!(choose(64, 64, || true), Protocol::Eager);
        assert_eq!(choose(0, 64, || false), Protocol::Rendezvous, "no credit");
    }

    #[test]
    fn a_pushed_rendezvous_with_acknowledgement_runs_in_order() {
        let mut s = SendState::start(Protocol::Rendezvous);
        assert_eq!(s.owed(), Some(Answer::Clear));
        assert!(s.answer(Answer::Delivered).is_err(), "not before its payload");
        assert_eq!(s, SendState::Requested, "a refused answer changes nothing");
        assert_eq!(s.answer(Answer::Clear), Ok(Next::Move));
        assert_eq!(s.owed(), None);
        assert!(s.answer(Answer::Clear).is_err(), "a second clear-to-send");
        assert_eq!(s.moved(true), Next::Wait);
        assert_eq!(s.owed(), Some(Answer::Delivered));
        assert_eq!(s.answer(Answer::Delivered), Ok(Next::Complete));
    }

    #[test]
    fn a_push_the_receiver_pulled_the_rest_of_stops_while_or_after_it_moves() {
        let mut s = SendState::start(Protocol::Rendezvous);
        assert_eq!(s.answer(Answer::Clear), Ok(Next::Move));
        assert_eq!(s.clone().answer(Answer::Finish), Ok(Next::Stop), "while pushing");
        assert_eq!(s.moved(true), Next::Wait);
        assert_eq!(s, SendState::Pushed);
        assert_eq!(s.clone().answer(Answer::Finish), Ok(Next::Stop), "pushed whole");
        assert_eq!(s.answer(Answer::Delivered), Ok(Next::Complete));
    }

    #[test]
    fn a_pulled_rendezvous_finishes_from_its_request() {
        let mut s = SendState::start(Protocol::Rendezvous);
        assert_eq!(s.answer(Answer::Finish), Ok(Next::Complete));
    }

    #[test]
    fn answers_out_of_turn_are_violations() {
        let mut eager = SendState::start(Protocol::Eager);
        for a in [Answer::Clear, Answer::Finish, Answer::Delivered] {
            assert!(matches!(eager.answer(a), Err(Error::Protocol(_))), "{a:?}");
        }
        assert_eq!(eager.moved(false), Next::Complete);
        let mut waiting = SendState::Moved;
        assert!(waiting.answer(Answer::Finish).is_err(), "an eager send is never pulled");
        assert!(waiting.answer(Answer::Clear).is_err());
    }
}
