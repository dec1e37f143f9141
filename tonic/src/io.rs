//! A byte stream over one xfer connection: what hyper reads and writes.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use futures::Sink;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use xfer::PeerAddr;
use xfer_tarpc::{Raw, Transport};

/// The most bytes written between two flushes that travel as one message;
/// a write past it sends what is buffered first. hyper writes an HTTP/2
/// frame header and its payload (16 KiB by default) as separate writes and
/// flushes after a batch of frames, so a large body goes as a few large
/// messages, each sent directly into a receive of its size, rather than as
/// hundreds of frame-sized ones.
pub const WRITE_MAX: usize = 256 << 10;

/// Messages are the bytes written, as they are (no encoding): a large
/// batch is itself the body that travels, and the body received is read
/// from directly.
/// The largest write that goes straight into the transport's frame being
/// filled ([`Transport::poll_write_bytes`]): an HTTP/2 frame of the default
/// largest size with its header, and whatever is smaller. A larger write
/// (and what follows it until the next flush) is buffered and sent as one
/// message of its own, which travels as a body into a receive of its size.
const DIRECT_MAX: usize = xfer_tarpc::wire::FRAME_MAX / 2 + 1024;

type Conn = Transport<Vec<u8>, Vec<u8>, Raw>;

/// One connection as a tokio `AsyncRead + AsyncWrite` byte stream (wrap it
/// in `hyper_util::rt::TokioIo` for hyper; [`crate::Connector`] does).
///
/// A write of up to about half a frame (vectored ones too: an HTTP/2
/// frame's header and payload) is copied once, straight into the
/// underlying connection's frame being filled
/// ([`Transport::poll_write_bytes`]), which goes out when full or at
/// `flush`; one of at least [`xfer_tarpc::INJECT_MIN`] bytes made while no
/// frame is being filled and no send is in flight (hyper's `DATA` frames,
/// after its flush) goes at once, from the caller's slices, by the
/// endpoint's vectored inject, not copied. A larger write is buffered with what follows it until `flush`,
/// or until [`WRITE_MAX`] bytes are buffered, and sent as one message,
/// which travels as a body of its own into a receive of its size. The
/// connection delivers its messages in order whatever their size. `flush`
/// sends what was written and waits for the connection's sends to
/// complete. Sending waits while the connection has its maximum of sends
/// in flight ([`xfer_tarpc::SENDS_MAX`]). A read copies received bytes, in order,
/// straight from the frame they arrived in ([`Transport::poll_read_bytes`]). `shutdown` sends a close after everything written: the peer
/// reads end of file once it has read all of it. Dropping the stream
/// without a shutdown sends what was written and the close too (best
/// effort: they are posted, not waited for).
pub struct XferIo {
    conn: Conn,
    /// Bytes written and not yet sent.
    write: Vec<u8>,
    shut: bool,
}

impl XferIo {
    pub(crate) fn new(conn: Conn) -> Self {
        XferIo {
            conn,
            write: Vec::new(),
            shut: false,
        }
    }

    /// The peer's handle in the endpoint's address vector.
    pub fn peer(&self) -> PeerAddr {
        self.conn.peer()
    }

    /// Sends the buffered bytes as one message, once the connection takes
    /// another send.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write.is_empty() {
            return Poll::Ready(Ok(()));
        }
        ready!(Pin::new(&mut self.conn).poll_ready(cx))?;
        let bytes = std::mem::take(&mut self.write);
        Poll::Ready(Pin::new(&mut self.conn).start_send(bytes))
    }
}

impl AsyncRead for XferIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().conn.poll_read_bytes(cx, buf)
    }
}

impl AsyncWrite for XferIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.shut {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "xfer stream shut down")));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if me.write.is_empty() && total <= DIRECT_MAX {
            // Straight into the frame being filled: one copy.
            return me.conn.poll_write_bytes(cx, bufs);
        }
        if me.write.len() >= WRITE_MAX {
            ready!(me.poll_send(cx))?;
        }
        if me.write.is_empty() && total <= DIRECT_MAX {
            return me.conn.poll_write_bytes(cx, bufs);
        }
        let mut room = WRITE_MAX - me.write.len();
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(room);
            me.write.extend_from_slice(&b[..take]);
            n += take;
            room -= take;
            if room == 0 {
                break;
            }
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_send(cx))?;
        Pin::new(&mut me.conn).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if !me.shut {
            ready!(me.poll_send(cx))?;
            me.shut = true;
        }
        Pin::new(&mut me.conn).poll_close(cx)
    }
}

impl Drop for XferIo {
    fn drop(&mut self) {
        if !self.shut {
            // Posts what was written and the close frame (a send's first
            // poll posts it); posted sends complete after their futures are
            // dropped, so the peer still reads every byte and its end of
            // file rather than waiting forever.
            // Sent past the limit of sends in flight: waiting is not possible here,
            // and a close without the bytes before it would read as a whole stream.
            if !self.write.is_empty() {
                let bytes = std::mem::take(&mut self.write);
                let _ = Pin::new(&mut self.conn).start_send(bytes);
            }
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
