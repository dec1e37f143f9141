//! Admission with a job key (`EndpointAttr::job_key`, `XFER_JOB_KEY`) on TCP
//! and on the other transports under the RDM engine (`shm`, `shm+tcp`): a peer
//! holding the server's key is served; one with another key or none is
//! refused before anything it sent is delivered, and counted.

mod common;

use std::time::{Duration, Instant};

use common::{expect, Node};
use xfer::{JobKey, PeerAddr};

fn keyed(key: Option<&[u8]>) -> Node {
    let mut attr = common::test_attr();
    attr.job_key = key.map(|k| JobKey(k.to_vec()));
    Node::with_attr(&attr)
}

fn counter(node: &Node, name: &str) -> u64 {
    let c = node.ep.counters().expect("counters");
    c.iter().find(|(k, _)| *k == name).map_or(0, |&(_, v)| v)
}

/// A client's send of `tag` to `server`: its completion (the server is
/// polled meanwhile).
fn send_from(client: &mut Node, server: &mut Node, tag: u64) -> xfer::Completion {
    let peer = client.add(server);
    client.ep.tsend(peer, tag, vec![tag as u8; 16], tag).expect("tsend");
    expect(&mut [client, server], 0, tag)
}

#[test]
fn a_peer_with_the_job_key_is_served_and_others_are_refused() {
    let mut server = keyed(Some(b"the job's key"));
    // Every message from anyone, on one any-source receive per tag.
    for tag in 1..=3 {
        server
            .ep
            .trecv(PeerAddr::UNSPEC, tag, 0, vec![0; 64], 100 + tag)
            .expect("trecv");
    }

    // Without a key: the client learns why, nothing arrives.
    let mut none = keyed(None);
    let c = send_from(&mut none, &mut server, 1);
    let err = c.result.expect_err("a send without the key");
    eprintln!("without a key: {err}");
    // With another key: refused by the server.
    let mut other = keyed(Some(b"another key"));
    let c = send_from(&mut other, &mut server, 2);
    let err = c.result.expect_err("a send with another key");
    eprintln!("with another key: {err}");
    assert_eq!(counter(&server, "admission_refused"), 2, "both refusals counted");

    // With the key: served.
    let mut good = keyed(Some(b"the job's key"));
    let c = send_from(&mut good, &mut server, 3);
    c.result.expect("a send with the key");
    let got = expect(&mut [&mut server, &mut good], 0, 103);
    assert_eq!(got.result, Ok(()));
    assert_eq!(got.len, 16);
    assert_eq!(got.buf.as_deref().map(|b| &b[..16]), Some(&[3u8; 16][..]));

    // Nothing the refused peers sent was delivered.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        server.poll();
    }
    assert!(
        server.take(101).is_none() && server.take(102).is_none(),
        "a refused peer's message arrived"
    );
    assert_eq!(counter(&server, "admission_refused"), 2);
}
