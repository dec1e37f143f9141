//! A tarpc service over xfer-tarpc: a server node and a client node (two
//! endpoints over real sockets, TCP on 127.0.0.1 unless `XFER_TCP_ADDR`
//! or `XFER_PROVIDER` say otherwise), two client connections at once,
//! messages from empty to larger than a frame (the `LARGE` + `BODY` path),
//! many calls outstanding, every answer checked.

use std::time::Duration;

use futures::StreamExt;
use tarpc::server::{BaseChannel, Channel};

#[tarpc::service]
trait Store {
    /// The bytes reversed.
    async fn reverse(bytes: Vec<u8>) -> Vec<u8>;
    /// The sum of the bytes.
    async fn sum(bytes: Vec<u8>) -> u64;
}

#[derive(Clone)]
struct Server;

impl Store for Server {
    async fn reverse(self, _: tarpc::context::Context, mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.reverse();
        bytes
    }

    async fn sum(self, _: tarpc::context::Context, bytes: Vec<u8>) -> u64 {
        bytes.iter().map(|&b| u64::from(b)).sum()
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

fn ctx() -> tarpc::context::Context {
    let mut c = tarpc::context::current();
    c.deadline = std::time::Instant::now() + Duration::from_secs(60);
    c
}

#[tokio::test(flavor = "current_thread")]
async fn a_tarpc_service_over_xfer() {
    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    let server = xfer_tarpc::Node::open().expect("server node");
    let name = server.name();
    tokio::spawn(server.incoming().for_each(|conn| async move {
        let conn = conn.expect("a connection");
        tokio::spawn(
            BaseChannel::with_defaults(conn)
                .execute(Server.serve())
                .for_each(|r| async move {
                    tokio::spawn(r);
                }),
        );
    }));
    let node = xfer_tarpc::Node::open().expect("client node");
    let a = StoreClient::new(Default::default(), node.connect(&name).await.unwrap()).spawn();
    let b = StoreClient::new(Default::default(), node.connect(&name).await.unwrap()).spawn();
    let big = xfer_tarpc::wire::FRAME_MAX * 3 + 5;
    for (i, len) in [0, 1, 100, xfer_tarpc::wire::FRAME_MAX, big, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let msg = pattern(len, i as u64);
        let mut want = msg.clone();
        want.reverse();
        assert_eq!(a.reverse(ctx(), msg.clone()).await.unwrap(), want, "{len} bytes");
        let sum: u64 = msg.iter().map(|&b| u64::from(b)).sum();
        assert_eq!(b.sum(ctx(), msg).await.unwrap(), sum, "{len} bytes");
    }
    // Many calls outstanding on both connections at once.
    let calls = (0..128u64).map(|i| {
        let (a, b) = (a.clone(), b.clone());
        async move {
            let msg = pattern(64 + i as usize * 97, i);
            let sum: u64 = msg.iter().map(|&b| u64::from(b)).sum();
            let client = if i % 2 == 0 { a } else { b };
            assert_eq!(client.sum(ctx(), msg).await.unwrap(), sum, "call {i}");
        }
    });
    futures::future::join_all(calls).await;
}

/// Messages small (batched in `DATA` frames) and large (a `LARGE` frame and
/// a `BODY` of its own tag, which the provider may complete after later
/// frames) interleaved, sent without a flush between them and with
/// flushes, arrive in the order they were sent.
#[tokio::test(flavor = "current_thread")]
async fn large_and_small_messages_arrive_in_order() {
    order_kept(false).await;
}

/// The same over [`xfer_tarpc::Raw`] transports (byte strings as they are,
/// bodies handed over without a copy), as xfer-tonic's byte stream uses.
#[tokio::test(flavor = "current_thread")]
async fn raw_byte_strings_arrive_in_order() {
    order_kept(true).await;
}

/// Sends `messages` on `conn`, some flushed one by one, then closes it.
async fn send_all<S>(mut conn: S, messages: &[Vec<u8>])
where
    S: futures::Sink<Vec<u8>, Error = std::io::Error> + Unpin,
{
    use futures::SinkExt;

    for (i, m) in messages.iter().enumerate() {
        if i % 3 == 0 {
            conn.send(m.clone()).await.expect("send and flush");
        } else {
            conn.feed(m.clone()).await.expect("send");
        }
    }
    conn.close().await.expect("close");
}

/// Small and large messages, interleaved, read back in order and whole.
async fn order_kept(raw: bool) {
    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    let frame = xfer_tarpc::wire::FRAME_MAX;
    let sizes = [1, frame * 40, 3, 0, frame + 1, 100, 1 << 20, 5, frame - 20, 64 << 10, 7];
    let messages: Vec<Vec<u8>> = (0..5 * sizes.len())
        .map(|i| pattern(sizes[i % sizes.len()], i as u64))
        .collect();
    tokio::time::timeout(Duration::from_secs(60), async {
        let server = xfer_tarpc::Node::open().expect("server node");
        let name = server.name();
        let reader = tokio::spawn(async move {
            let all = |m: std::io::Result<Vec<u8>>| m.expect("a message");
            if raw {
                let mut conn = std::pin::pin!(server.incoming_raw());
                let conn = conn.next().await.expect("a connection").expect("accept");
                conn.map(all).collect::<Vec<Vec<u8>>>().await
            } else {
                let mut conn = std::pin::pin!(server.incoming::<Vec<u8>, Vec<u8>>());
                let conn = conn.next().await.expect("a connection").expect("accept");
                conn.map(all).collect::<Vec<Vec<u8>>>().await
            }
        });
        let node = xfer_tarpc::Node::open().expect("client node");
        if raw {
            send_all(node.connect_raw(&name).await.expect("connect"), &messages).await;
        } else {
            let conn = node.connect::<Vec<u8>, Vec<u8>>(&name).await.expect("connect");
            send_all(conn, &messages).await;
        }
        let got = reader.await.expect("reader task");
        assert_eq!(got.len(), messages.len(), "messages lost or added");
        for (i, (got, want)) in got.iter().zip(&messages).enumerate() {
            assert!(
                got == want,
                "message {i} ({} bytes) out of order or changed",
                want.len()
            );
        }
    })
    .await
    .expect("within the limit");
}

/// A writer that posts large messages (a `LARGE` frame and a pushed `BODY`
/// each, over `tcp`) beyond the reader's `BODIES_AHEAD`, then small frames
/// enough to fill every byte of credit the reader's endpoint grants it (cut
/// to the initial 128 KiB) in unexpected messages while the reader waits
/// for the first body, down to requests to send that wait for the last bytes. The pushed bytes of the
/// body the reader waits for must not queue behind those (they did, and
/// the stream stopped for good: the tonic bench over `tcp` hung that way
/// when frames were 4 KiB). The writer is the test, posting the frames by
/// hand, so that all of them are queued before the reader reads one.
#[tokio::test(flavor = "current_thread")]
async fn a_body_waited_for_arrives_while_the_credit_is_held_in_frames() {
    use xfer::PeerAddr;
    use xfer_tarpc::wire;

    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    let mut attr = xfer::DomainAttr::with_provider("tcp");
    attr.params.set("tcp.eager_credit", "131072");
    let server = xfer_tarpc::Node::open_with(&attr).expect("server node");
    let client = xfer_tarpc::Node::open_with(&attr).expect("client node");
    let name = server.name();
    let ep = client.endpoint().clone();
    let bodies = (xfer_tarpc::BODIES_AHEAD >> 20) as u32 + 1;
    let small = 1000;
    let mut want: Vec<Vec<u8>> = (0..bodies).map(|i| pattern(1 << 20, u64::from(i))).collect();
    want.extend((0..small).map(|i| pattern(1000, 100 + i)));
    tokio::time::timeout(Duration::from_secs(60), async {
        let reader = tokio::spawn(async move {
            let mut conns = std::pin::pin!(server.incoming_raw());
            let conn = conns.next().await.expect("a connection").expect("accept");
            conn.map(|m| m.expect("a message")).collect::<Vec<Vec<u8>>>().await
        });
        let peer = ep.endpoint().av().insert(&name).expect("the server's name");
        let local = 9u32;
        let mut hello = vec![wire::VERSION];
        hello.extend_from_slice(&local.to_le_bytes());
        hello.extend_from_slice(&client.name());
        let accept = ep.trecv(PeerAddr::UNSPEC, wire::tag(wire::ACCEPT, local, 0), 0, vec![0; 4]);
        let ((got, accepted), (sent, _)) = futures::join!(accept, ep.tsend(peer, wire::tag(wire::HELLO, 0, 0), hello));
        sent.expect("hello");
        got.expect("accept");
        let remote = u32::from_le_bytes(accepted[..4].try_into().unwrap());
        let frame = wire::tag(wire::FRAME, remote, 0);
        let mut out = Vec::new();
        for (seq, body) in want[..bodies as usize].iter().enumerate() {
            out.push((frame, wire::large(seq as u32, body.len())));
            out.push((wire::tag(wire::BODY, remote, seq as u32), body.clone()));
        }
        for m in &want[bodies as usize..] {
            let mut data = vec![wire::DATA];
            wire::push_len(&mut data, m.len());
            data.extend_from_slice(m);
            out.push((frame, data));
        }
        out.push((frame, wire::close(u64::from(bodies) + small)));
        // Posted in order, by the first poll of each, before the reader runs.
        let mut sends = Vec::new();
        for (tag, buf) in out {
            let mut send = Box::pin(ep.tsend(peer, tag, buf));
            if futures::poll!(&mut send).is_pending() {
                sends.push(send);
            }
        }
        let counters = ep.endpoint().counters().expect("counters");
        let waits = counters.iter().find(|(k, _)| *k == "credit_waits").map(|&(_, v)| v);
        assert!(waits > Some(0), "the small messages used up the credit: {counters:?}");
        for send in sends {
            send.await.0.expect("a send");
        }
        let got = reader.await.expect("reader task");
        assert_eq!(got.len(), want.len(), "messages lost or added");
        for (i, (got, want)) in got.iter().zip(&want).enumerate() {
            assert!(
                got == want,
                "message {i} ({} bytes) out of order or changed",
                want.len()
            );
        }
    })
    .await
    .expect("every message within the limit");
}

/// Two sends posted (their futures polled once) and dropped, with nothing
/// of the sender's waiting afterwards: both still arrive. The TCP provider
/// holds the second of a burst back to write it with later ones, at the
/// endpoint's next progress, which only the node's own progress task then
/// makes (what a byte stream dropped after writing relies on).
/// Two nodes opened with `attr`, `a` having sent `b` a message (so their
/// connection is up and later sends are written at once), and `b`'s
/// address in `a`'s address vector.
async fn connected_nodes(
    attr: &xfer::DomainAttr,
) -> (
    std::sync::Arc<xfer_tarpc::Node>,
    std::sync::Arc<xfer_tarpc::Node>,
    xfer::PeerAddr,
) {
    let a = xfer_tarpc::Node::open_with(attr).expect("node a");
    let b = xfer_tarpc::Node::open_with(attr).expect("node b");
    let peer = a.endpoint().endpoint().av().insert(&b.name()).expect("insert b");
    let warm = b.endpoint().trecv(xfer::PeerAddr::UNSPEC, 1, 0, vec![0; 8]);
    let both = async { futures::join!(a.endpoint().tsend(peer, 1, b"warm".to_vec()), warm) };
    let ((sent, _), (got, _)) = tokio::time::timeout(Duration::from_secs(60), both)
        .await
        .expect("the first message arrives within the limit");
    sent.expect("warm send");
    got.expect("warm receive");
    (a, b, peer)
}

#[tokio::test(flavor = "current_thread")]
async fn sends_dropped_after_posting_arrive() {
    use xfer::PeerAddr;

    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    // TCP's coalescing asked for (a node turns it off otherwise), so that
    // the sends after the first of a burst are held for a progress.
    let mut attr = xfer::DomainAttr::from_env();
    attr.params.set("tcp.coalesce", "32");
    let (a, b, peer) = connected_nodes(&attr).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        for n in [2, 1, 3, 4u64] {
            let tag = |i: u64| 100 * n + i;
            let recvs: Vec<_> = (0..n)
                .map(|i| Box::pin(b.endpoint().trecv(PeerAddr::UNSPEC, tag(i), 0, vec![0; 64])))
                .collect();
            for i in 0..n {
                let mut send = Box::pin(a.endpoint().tsend(peer, tag(i), pattern(40, tag(i))));
                let _ = futures::poll!(&mut send);
                drop(send);
            }
            for (i, recv) in recvs.into_iter().enumerate() {
                let (got, buf) = recv.await;
                let len = got.unwrap_or_else(|e| panic!("burst of {n}, send {i}: {e}")).len;
                assert_eq!(buf[..len], pattern(40, tag(i as u64))[..], "burst of {n}, send {i}");
            }
        }
    })
    .await
    .expect("every dropped send arrives within the limit");
}

/// The frames a node's endpoint holds for the next progress (TCP's
/// `coalesced` counter), after a burst of sends posted one after another.
async fn held_in_a_burst(attr: &xfer::DomainAttr) -> Option<u64> {
    use xfer::PeerAddr;

    let (a, b, peer) = connected_nodes(attr).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        let recvs: Vec<_> = (0..8u64)
            .map(|i| b.endpoint().trecv(PeerAddr::UNSPEC, 10 + i, 0, vec![0; 64]))
            .collect();
        let sends: Vec<_> = (0..8u64)
            .map(|i| a.endpoint().tsend(peer, 10 + i, pattern(40, i)))
            .collect();
        let (sent, got) = futures::join!(futures::future::join_all(sends), futures::future::join_all(recvs));
        for (i, ((s, _), (r, buf))) in sent.into_iter().zip(got).enumerate() {
            s.expect("send");
            let len = r.expect("receive").len;
            assert_eq!(buf[..len], pattern(40, i as u64)[..], "send {i}");
        }
    })
    .await
    .expect("the burst arrives within the limit");
    let counters = a.endpoint().endpoint().counters().expect("counters");
    counters.iter().find(|(k, _)| *k == "coalesced").map(|&(_, v)| v)
}

/// Over TCP a node's endpoint writes each frame when it is posted (its
/// connections batch messages into frames themselves, and a flush waits
/// for the frame's send), unless the domain's params ask for coalescing.
#[tokio::test(flavor = "current_thread")]
async fn a_nodes_tcp_endpoint_holds_no_frames_unless_asked() {
    if std::env::var_os("XFER_TCP_COALESCE").is_some() {
        eprintln!("XFER_TCP_COALESCE set: the node keeps what it says; nothing to check");
        return;
    }
    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    let tcp = xfer::DomainAttr::with_provider("tcp");
    let held = held_in_a_burst(&tcp).await;
    assert_eq!(held.unwrap_or(0), 0, "a node's endpoint held frames of a burst");
    let mut asked = tcp.clone();
    asked.params.set("tcp.coalesce", "32");
    let held = held_in_a_burst(&asked).await;
    assert!(
        held.is_some_and(|n| n > 0),
        "coalescing asked for, the burst's frames were not held: {held:?}"
    );
}

/// A write of an HTTP/2 frame of the protocol's default largest size (16 KiB
/// and its 9-byte header, what hyper flushes at a time in a large body)
/// travels as one xfer message: a `DATA` frame that a standing frame receive
/// takes whole, not a `LARGE` frame and a `BODY` (two sends, and a body
/// receive posted only once the frame is read). The server here is the test:
/// it answers the hello by hand and reads the connection's frames with raw
/// receives of [`FRAME_MAX`](xfer_tarpc::wire::FRAME_MAX) bytes.
#[tokio::test(flavor = "current_thread")]
async fn an_http2_frame_travels_as_one_message() {
    use futures::SinkExt;

    let (server, client) = hand_server();
    let (name, ep) = (server.name(), server.endpoint().clone());
    let message = pattern(16 << 10 | 9, 3);
    tokio::time::timeout(Duration::from_secs(60), async {
        let sender = {
            let message = message.clone();
            tokio::spawn(async move {
                let mut conn = client.connect_raw(&name).await.expect("connect");
                conn.send(message).await.expect("send and flush");
                conn.close().await.expect("close");
            })
        };
        let local = accept_by_hand(&ep).await;
        let all = data_frame(&ep, local).await;
        assert_eq!(all, [message], "the frame holds the message whole");
        sender.await.expect("sender");
    })
    .await
    .expect("within the limit");
}

/// A byte write of at least `INJECT_MIN` bytes (an HTTP/2 `DATA` frame's
/// header and payload, two slices) made while nothing else is in flight
/// goes at once, as a `DATA` frame of one message sent from the writer's
/// slices, before any flush; a small write then opens a frame, and a large
/// write after it, with that frame still filling, joins it behind the small
/// one (the order written). The server here is the test, as above.
#[tokio::test(flavor = "current_thread")]
async fn a_large_byte_write_goes_at_once_and_keeps_its_place() {
    use futures::SinkExt;
    use std::io::IoSlice;
    use std::task::{Context, Poll, Waker};
    const _: () = assert!(16393 >= xfer_tarpc::INJECT_MIN);

    let (server, client) = hand_server();
    let (name, ep) = (server.name(), server.endpoint().clone());
    let (first, second, small) = (pattern(16393, 1), pattern(16393, 2), pattern(9, 3));
    let (arrived, wait_first) = futures::channel::oneshot::channel::<()>();
    tokio::time::timeout(Duration::from_secs(60), async {
        let sender = {
            let (first, second, small) = (first.clone(), second.clone(), small.clone());
            tokio::spawn(async move {
                let mut conn = client.connect_raw(&name).await.expect("connect");
                // Polled once, with a waker that does nothing: each write
                // must be taken at once (none waits for anything).
                let write = |conn: &mut xfer_tarpc::Transport<Vec<u8>, Vec<u8>, xfer_tarpc::Raw>, m: &[u8]| {
                    let (head, rest) = m.split_at(m.len().min(9));
                    let bufs = [IoSlice::new(head), IoSlice::new(rest)];
                    conn.poll_write_bytes(&mut Context::from_waker(Waker::noop()), &bufs)
                };
                let n = write(&mut conn, &first);
                assert!(matches!(n, Poll::Ready(Ok(16393))), "{n:?}");
                wait_first.await.expect("the first frame arrived unflushed");
                for m in [&small, &second] {
                    let n = write(&mut conn, m);
                    assert!(matches!(n, Poll::Ready(Ok(k)) if k == m.len()), "{n:?}");
                }
                conn.flush().await.expect("flush");
                conn.close().await.expect("close");
            })
        };
        let local = accept_by_hand(&ep).await;
        let mut arrived = Some(arrived);
        for want in [vec![first], vec![small, second]] {
            let all = data_frame(&ep, local).await;
            let lens = |m: &[Vec<u8>]| m.iter().map(|m| m.len()).collect::<Vec<_>>();
            assert!(all == want, "{:?} against {:?}", lens(&all), lens(&want));
            if let Some(tx) = arrived.take() {
                tx.send(()).expect("the sender waits");
            }
        }
        sender.await.expect("sender");
    })
    .await
    .expect("within the limit");
}

/// A server node that the test serves by hand ([`accept_by_hand`],
/// [`data_frame`]), and a client node.
fn hand_server() -> (std::sync::Arc<xfer_tarpc::Node>, std::sync::Arc<xfer_tarpc::Node>) {
    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    let server = xfer_tarpc::Node::open().expect("server node");
    (server, xfer_tarpc::Node::open().expect("client node"))
}

/// Answers a client's hello on `ep` by hand, as a node would: the
/// connection id (7) whose frames the client sends then.
async fn accept_by_hand(ep: &xfer::aio::AsyncEndpoint) -> u32 {
    use xfer::PeerAddr;
    use xfer_tarpc::wire;

    let (got, hello) = ep
        .trecv(
            PeerAddr::UNSPEC,
            wire::tag(wire::HELLO, 0, 0),
            wire::KIND_ONLY,
            vec![0; 512],
        )
        .await;
    let hello = &hello[..got.expect("a hello").len];
    assert_eq!(hello[0], wire::VERSION);
    let client_conn = u32::from_le_bytes(hello[1..5].try_into().unwrap());
    let peer = ep.endpoint().av().insert(&hello[5..]).expect("the client's name");
    let local = 7u32;
    let (sent, _) = ep
        .tsend(
            peer,
            wire::tag(wire::ACCEPT, client_conn, 0),
            local.to_le_bytes().to_vec(),
        )
        .await;
    sent.expect("accept");
    local
}

/// The messages of the next frame to connection `local` on `ep`, which
/// must be a `DATA` frame.
async fn data_frame(ep: &xfer::aio::AsyncEndpoint, local: u32) -> Vec<Vec<u8>> {
    use xfer_tarpc::wire;

    let (got, frame) = ep
        .trecv(
            xfer::PeerAddr::UNSPEC,
            wire::tag(wire::FRAME, local, 0),
            0,
            vec![0; wire::FRAME_MAX],
        )
        .await;
    let frame = &frame[..got.expect("a frame").len];
    match wire::parse(frame).expect("a well-formed frame") {
        wire::Frame::Data(bytes) => wire::messages(bytes).map(|m| m.expect("a message").to_vec()).collect(),
        other => panic!("not a DATA frame: {other:?}"),
    }
}

/// Bytes written straight into frames (`poll_write_bytes`, as xfer-tonic's
/// byte stream writes), interleaved with large messages sent whole and
/// with flushes, arrive whole and in the order written, read as a byte stream straight from the frames
/// (`poll_read_bytes`), then the end of the stream.
#[tokio::test(flavor = "current_thread")]
async fn bytes_written_into_frames_and_posted_arrive_in_order() {
    use futures::SinkExt;
    use std::io::IoSlice;

    if std::env::var_os("XFER_TCP_ADDR").is_none() {
        std::env::set_var("XFER_TCP_ADDR", "127.0.0.1");
    }
    let frame = xfer_tarpc::wire::FRAME_MAX;
    let sizes = [9, frame / 2 + 9, 1, frame - 3, frame * 3, 16393, 200_000, 4];
    let chunks: Vec<Vec<u8>> = (0..6 * sizes.len())
        .map(|i| pattern(sizes[i % sizes.len()], i as u64))
        .collect();
    let want: Vec<u8> = chunks.concat();
    tokio::time::timeout(Duration::from_secs(60), async {
        let server = xfer_tarpc::Node::open().expect("server node");
        let name = server.name();
        let reader = tokio::spawn(async move {
            let mut conn = std::pin::pin!(server.incoming_raw());
            let mut conn = conn.next().await.expect("a connection").expect("accept");
            // Read as a byte stream, in reads of odd sizes that end inside
            // messages and frames.
            let (mut got, mut space) = (Vec::new(), vec![0u8; 70_001]);
            for i in 0.. {
                let mut out = tokio::io::ReadBuf::new(&mut space[..[7, 1000, 70_001, 16_400][i % 4]]);
                std::future::poll_fn(|cx| conn.poll_read_bytes(cx, &mut out))
                    .await
                    .expect("read bytes");
                if out.filled().is_empty() {
                    break;
                }
                got.extend_from_slice(out.filled());
            }
            got
        });
        let node = xfer_tarpc::Node::open().expect("client node");
        let mut conn = node.connect_raw(&name).await.expect("connect");
        for (i, c) in chunks.iter().enumerate() {
            if c.len() > frame {
                conn.feed(c.clone()).await.expect("send whole");
            } else {
                // Split in two slices, as a header and its payload.
                let (a, b) = c.split_at(c.len() / 3);
                let mut at = 0;
                while at < c.len() {
                    let bufs = if at < a.len() {
                        [IoSlice::new(&a[at..]), IoSlice::new(b)]
                    } else {
                        [IoSlice::new(&b[at - a.len()..]), IoSlice::new(&[])]
                    };
                    let n = std::future::poll_fn(|cx| conn.poll_write_bytes(cx, &bufs))
                        .await
                        .expect("write bytes");
                    assert!(n > 0, "a write takes at least a byte");
                    at += n;
                }
            }
            if i % 2 == 0 {
                conn.flush().await.expect("flush");
            }
        }
        conn.close().await.expect("close");
        let got = reader.await.expect("reader task");
        assert_eq!(got.len(), want.len(), "bytes lost or added");
        assert!(got == want, "bytes out of order or changed");
    })
    .await
    .expect("within the limit");
}
