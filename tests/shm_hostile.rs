//! A hostile local peer of the same user against an shm endpoint: it says
//! hello as an endpoint would, leaves a request to send, then writes an
//! impossible entry into its ring. The endpoint drops that peer alone (a
//! protocol error, counted, its request dropped) and keeps serving an
//! honest peer before and after.

mod common;

use std::time::Instant;

use common::{expect, pattern, Node, DEADLINE};
use xfer::PeerAddr;
use xfer_core::unstable::rdm::engine::wire::{Header, Kind};
use xfer_shm::{ShmConfig, ShmPort};

fn counter(n: &Node, name: &str) -> u64 {
    let c = n.ep.counters().expect("counters");
    c.iter().find(|(k, _)| *k == name).map_or(0, |&(_, v)| v)
}

fn exchange(hub: &mut Node, good: &mut Node, to_hub: PeerAddr, ctx: u64) {
    hub.ep.trecv(PeerAddr::UNSPEC, 5, 0, vec![0; 64], ctx).unwrap();
    good.ep.tsend(to_hub, 5, pattern(64, ctx), ctx + 1).unwrap();
    let r = expect(&mut [hub, good], 0, ctx);
    assert_eq!(r.result, Ok(()));
    assert_eq!(r.buf.unwrap(), pattern(64, ctx));
}

#[test]
fn a_corrupt_ring_entry_ends_that_peer_alone() {
    let (mut hub, mut good) = (Node::on("shm"), Node::on("shm"));
    let to_hub = good.add(&hub);
    exchange(&mut hub, &mut good, to_hub, 1);

    let mut hostile = ShmPort::open(&ShmConfig::default()).expect("port");
    let name = hub.ep.name();
    let peer = hostile.connect(&name.as_bytes()[1..]).expect("connect to the hub");
    // A hello naming an endpoint of its own, then a request to send.
    let mut fake = vec![xfer_shm::PROVIDER_ID];
    fake.extend_from_slice(hostile.address());
    hostile
        .send(peer, &Header::new(Kind::Hello).encode(), &fake)
        .expect("hello");
    let mut rts = Header::message(Kind::Rts, Some(9), None);
    rts.len = 1 << 20;
    rts.token = 77;
    hostile.send(peer, &rts.encode(), &[]).expect("rts");
    let start = Instant::now();
    while counter(&hub, "unexpected_entries") == 0 {
        hub.poll();
        hostile.poll(|_| {});
        assert!(start.elapsed() < DEADLINE, "the hostile peer's request never arrived");
    }
    hostile.send_raw_entry(peer, u64::MAX);
    while counter(&hub, "protocol_errors") == 0 {
        hub.poll();
        assert!(start.elapsed() < DEADLINE, "the corrupt entry went unnoticed");
    }
    assert_eq!(counter(&hub, "protocol_errors"), 1);
    assert_eq!(counter(&hub, "requests_dropped"), 1, "its request went with it");
    assert_eq!(counter(&hub, "unexpected_entries"), 0);
    assert_eq!(counter(&hub, "connections"), 1, "the honest peer's connection stays");
    exchange(&mut hub, &mut good, to_hub, 3);
}
