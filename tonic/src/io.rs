//! A byte stream over one xfer connection: what hyper reads and writes.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use futures::{Sink, StreamExt};
use serde_bytes::ByteBuf;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use xfer::PeerAddr;
use xfer_tarpc::wire::{FRAME_MAX, PER_MESSAGE};
use xfer_tarpc::Transport;

/// The most bytes one write sends: what fits in one `DATA` frame of the
/// underlying connection with its length prefix and the codec's (at most
/// 9 bytes). Larger writes are partial writes, which hyper continues.
/// Frames of one connection share one tag and so arrive in order; larger
/// messages would travel as bodies of their own tags, which may complete
/// out of order, so a byte stream never sends one.
pub const CHUNK_MAX: usize = FRAME_MAX - 1 - PER_MESSAGE - 9;

type Conn = Transport<ByteBuf, ByteBuf>;

/// One connection as a tokio `AsyncRead + AsyncWrite` byte stream (wrap it
/// in `hyper_util::rt::TokioIo` for hyper; [`crate::Connector`] does).
///
/// A write sends its bytes (at most [`CHUNK_MAX`]) as one message, queued
/// until `flush` (hyper flushes after each batch of writes); writes wait
/// while the connection has its maximum of sends in flight
/// ([`xfer_tarpc::SENDS_MAX`]). A read returns bytes of the next message
/// in order. `shutdown` sends a close after everything written: the peer
/// reads end of file once it has read all of it. Dropping the stream
/// without a shutdown sends the close too (best effort: it is posted,
/// not waited for).
pub struct XferIo {
    conn: Conn,
    /// The message being read, from `pos`.
    read: Vec<u8>,
    pos: usize,
    eof: bool,
    shut: bool,
}

impl XferIo {
    pub(crate) fn new(conn: Conn) -> Self {
        XferIo {
            conn,
            read: Vec::new(),
            pos: 0,
            eof: false,
            shut: false,
        }
    }

    /// The peer's handle in the endpoint's address vector.
    pub fn peer(&self) -> PeerAddr {
        self.conn.peer()
    }
}

impl AsyncRead for XferIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.pos < me.read.len() {
                let n = buf.remaining().min(me.read.len() - me.pos);
                buf.put_slice(&me.read[me.pos..me.pos + n]);
                me.pos += n;
                return Poll::Ready(Ok(()));
            }
            if me.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(me.conn.poll_next_unpin(cx)) {
                Some(Ok(bytes)) => {
                    me.read = bytes.into_vec();
                    me.pos = 0;
                }
                Some(Err(e)) => return Poll::Ready(Err(e)),
                None => me.eof = true,
            }
        }
    }
}

impl AsyncWrite for XferIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.shut {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "xfer stream shut down")));
        }
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(Pin::new(&mut me.conn).poll_ready(cx))?;
        let n = buf.len().min(CHUNK_MAX);
        Pin::new(&mut me.conn).start_send(ByteBuf::from(buf[..n].to_vec()))?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().conn).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.shut = true;
        Pin::new(&mut me.conn).poll_close(cx)
    }
}

impl Drop for XferIo {
    fn drop(&mut self) {
        if !self.shut {
            // Posts the close frame (its first poll posts it); posted sends
            // complete after their futures are dropped, so the peer still
            // reads its end of file rather than waiting forever.
            let mut cx = Context::from_waker(Waker::noop());
            let _ = Pin::new(&mut self.conn).poll_close(&mut cx);
        }
    }
}

impl tonic::transport::server::Connected for XferIo {
    type ConnectInfo = PeerAddr;

    fn connect_info(&self) -> PeerAddr {
        self.peer()
    }
}
