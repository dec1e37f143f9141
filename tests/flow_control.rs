//! A fast sender against a receiver that posts no receives: what the
//! receiver holds stays within the eager credit it grants, the sender falls
//! back to rendezvous (its buffers wait with it) and its injects meet
//! `Error::Again`; once the receives come, everything arrives, in order.
//! The TCP provider's eager credit (docs/PROTOCOL.md, "Eager credit") and
//! the verbs provider's (docs/PROTOCOL-VERBS.md, "Credit"; the guest runs
//! this with `XFER_VERBS_EAGER_CREDIT=256k`, the budget below); over verbs
//! also with the receiver silent for a while (not even polling): its shared
//! receive queue never runs dry, so the device sends no RNR NAK (the guest
//! run also shrinks the SRQ to 32 buffers so that the transport's
//! receive-slot credit, not the engine's byte credit, is what keeps it from
//! running dry). Skipped on a provider without eager credit. A peer that
//! ignores its credit loses its connection: the RDM engine's unit test
//! `a_peer_past_its_credit_loses_its_connection`.

mod common;

use std::time::{Duration, Instant};

use common::{expect, pattern, test_attr, Node};
use xfer::{CompletionLevel, Error, PeerAddr, SendOp};

const BUDGET: usize = 256 << 10;
const MSG: usize = 4096;
const COUNT: u64 = 2000;

fn counter(n: &Node, name: &str) -> Option<u64> {
    let c = n.ep.counters().expect("counters");
    c.iter().find(|(k, _)| *k == name).map(|&(_, v)| v)
}

/// A node whose peers may have at most [`BUDGET`] eager bytes in flight to it.
fn node() -> Node {
    let mut attr = test_attr();
    attr.params.set("tcp.eager_credit", BUDGET.to_string());
    attr.params.set("shm.eager_credit", BUDGET.to_string());
    Node::with_attr(&attr)
}

/// A sender and a receiver that know each other, with each one's handle of
/// the other; `None` (skipped, with a message) on a provider without eager
/// credit.
fn pair() -> Option<(Node, Node, PeerAddr, PeerAddr)> {
    let (tx, rx) = (node(), node());
    if counter(&rx, "unexpected_bytes").is_none() {
        eprintln!("skipping: this provider has no eager credit");
        return None;
    }
    let (to_rx, from_tx) = (tx.add(&rx), rx.add(&tx));
    Some((tx, rx, to_rx, from_tx))
}

/// RNR NAKs the machine's RDMA devices received so far (rxe's
/// `rcvd_rnr_err`, summed over devices and ports); `None` without any.
fn rnr_naks() -> Option<u64> {
    let mut total = None;
    for dev in std::fs::read_dir("/sys/class/infiniband").ok()?.flatten() {
        for port in std::fs::read_dir(dev.path().join("ports"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = port.path().join("hw_counters/rcvd_rnr_err");
            if let Some(n) = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
            {
                total = Some(total.unwrap_or(0) + n);
            }
        }
    }
    total
}

/// Polls both nodes for `time`, checking the receiver's unexpected bytes
/// after every poll; returns the largest seen.
fn churn(tx: &mut Node, rx: &mut Node, time: Duration) -> u64 {
    let (start, mut most) = (Instant::now(), 0);
    while start.elapsed() < time {
        tx.poll();
        rx.poll();
        most = most.max(counter(rx, "unexpected_bytes").unwrap_or(0));
    }
    most
}

#[test]
fn slow_receiver_holds_at_most_its_credit_and_loses_nothing() {
    let Some((mut tx, mut rx, to_rx, from_tx)) = pair() else {
        return;
    };
    // Both verbs providers share the SRQ's rule: no RNR NAK.
    let verbs = tx.domain.provider().starts_with("verbs");
    let rnr_before = rnr_naks();
    // 8 MB of eager-sized messages, 32 times the credit, nothing posted: a
    // quarter while both sides progress, then the rest while only the
    // sender does (the receiver is silent: its device takes what arrives
    // into the receive buffers it has posted, and nothing reposts them).
    for i in 0..COUNT / 4 {
        tx.ep.tsend(to_rx, 5, pattern(MSG, i), i).unwrap();
    }
    let mut most = churn(&mut tx, &mut rx, Duration::from_millis(200));
    for i in COUNT / 4..COUNT {
        tx.ep.tsend(to_rx, 5, pattern(MSG, i), i).unwrap();
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        tx.poll();
    }
    most = most.max(churn(&mut tx, &mut rx, Duration::from_millis(300)));
    assert!(most > 0, "some messages went eager");
    assert!(most <= BUDGET as u64, "receiver held {most} B of unexpected messages");
    assert!(
        counter(&tx, "credit_stalls").unwrap() > 0,
        "the sender ran out of credit"
    );
    let early = tx.done.len();
    assert!(
        early < COUNT as usize,
        "sends waiting for receives cannot all be done: {early}"
    );

    // The receives come: every message arrives, in order, intact.
    for i in 0..COUNT {
        rx.ep.trecv(from_tx, 5, 0, vec![0; MSG], 100_000 + i).unwrap();
    }
    for i in 0..COUNT {
        let c = expect(&mut [&mut tx, &mut rx], 1, 100_000 + i);
        assert_eq!(c.result, Ok(()), "message {i}");
        assert!(
            c.buf.unwrap() == pattern(MSG, i),
            "message {i} arrived intact and in order"
        );
    }
    for i in 0..COUNT {
        assert_eq!(expect(&mut [&mut tx, &mut rx], 0, i).result, Ok(()), "send {i}");
    }
    assert_eq!(counter(&rx, "unexpected_bytes"), Some(0));
    eprintln!(
        "{}: receiver held at most {most} B unexpected (budget {BUDGET}); sender credit_stalls {:?}, \
         credit_waits {:?}; receiver credit_returns {:?}",
        tx.domain.provider(),
        counter(&tx, "credit_stalls"),
        counter(&tx, "credit_waits"),
        counter(&rx, "credit_returns"),
    );
    assert_eq!(
        counter(&rx, "credit_violations").unwrap_or(0),
        0,
        "a peer within its credit"
    );
    if verbs {
        match (rnr_before, rnr_naks()) {
            (Some(before), Some(after)) => {
                eprintln!("rcvd_rnr_err: {before} before, {after} after");
                assert_eq!(after - before, 0, "RNR NAKs: the receive queue ran dry");
            }
            _ => eprintln!("no rcvd_rnr_err counter: RNR not checked"),
        }
        assert!(
            counter(&rx, "credit_returns").unwrap() > 0,
            "the receiver returned credit"
        );
    }
}

/// Requests to send cost credit as eager messages do (their unexpected
/// entries): a sender with more large messages outstanding than the
/// receiver's credit pays for keeps the rest waiting, in order, behind
/// them, and the receiver keeps at most what it granted; once receives
/// come, everything arrives in order, a small message sent behind the
/// waiting requests too.
/// Sends asking for delivery completion to a receiver that posts no
/// receives: the receiver holds no more than its credit; over TCP those the
/// credit pays for complete as the receiver holds them (acknowledged once
/// read) and the rest wait by rendezvous, over verbs all wait (each is a
/// rendezvous); once the receives come everything arrives, in order, and
/// every send completes.
#[test]
fn acknowledged_sends_past_the_credit_wait_and_arrive() {
    let Some((mut tx, mut rx, to_rx, from_tx)) = pair() else {
        return;
    };
    let n = 4 * BUDGET as u64 / MSG as u64;
    for i in 0..n {
        let op = SendOp {
            peer: to_rx,
            tag: Some(1),
            data: None,
            buf: pattern(MSG, i).into(),
            context: i,
            completion: true,
            level: CompletionLevel::Delivery,
        };
        tx.ep.post_send(op).unwrap();
    }
    let (start, mut most) = (Instant::now(), 0);
    while start.elapsed() < Duration::from_millis(300) {
        tx.poll();
        rx.poll();
        most = most.max(counter(&rx, "unexpected_bytes").unwrap_or(0));
    }
    assert!(
        most <= BUDGET as u64,
        "receiver held {most} B unexpected, past its credit {BUDGET}"
    );
    if tx.domain.provider() == "tcp" {
        common::drive(&mut [&mut tx, &mut rx], "an acknowledged buffered message", |ns| {
            !ns[0].done.is_empty()
        });
    }
    assert!(
        (tx.done.len() as u64) < n,
        "every send completed with no receive posted"
    );
    for i in 0..n {
        rx.ep.trecv(from_tx, 1, 0, vec![0; MSG], 100_000 + i).unwrap();
    }
    for i in 0..n {
        let c = expect(&mut [&mut tx, &mut rx], 1, 100_000 + i);
        assert_eq!(c.result, Ok(()), "message {i}");
        assert!(c.buf.unwrap() == pattern(MSG, i), "message {i} intact and in order");
    }
    common::drive(&mut [&mut tx, &mut rx], "every send completion", |ns| {
        ns[0].done.len() as u64 == n
    });
    assert!(tx.done.iter().all(|c| c.result.is_ok()), "a send failed");
}

#[test]
fn requests_to_send_beyond_the_credit_wait_their_turn() {
    const BIG: usize = 512;
    let mut attr = test_attr();
    attr.params.set("tcp.eager_credit", BUDGET.to_string());
    attr.params.set("shm.eager_credit", BUDGET.to_string());
    attr.rndv_threshold = BIG / 2;
    let (mut tx, mut rx) = (Node::with_attr(&attr), Node::with_attr(&attr));
    if counter(&rx, "unexpected_memory").is_none() {
        eprintln!("skipping: this provider has no eager credit");
        return;
    }
    let (to_rx, from_tx) = (tx.add(&rx), rx.add(&tx));
    // Four times as many requests as the budget pays for, then a small
    // message behind them.
    let requests = 4 * BUDGET as u64 / xfer_core::unstable::rdm::credit::ENTRY_COST;
    for i in 0..requests {
        tx.ep.tsend(to_rx, 5, pattern(BIG, i), i).unwrap();
    }
    tx.ep.tsend(to_rx, 6, pattern(8, 1), requests).unwrap();
    let most_entries = {
        let (start, mut most) = (Instant::now(), 0);
        while start.elapsed() < Duration::from_millis(300) {
            tx.poll();
            rx.poll();
            most = most.max(counter(&rx, "unexpected_entries").unwrap_or(0));
        }
        most
    };
    let cap = BUDGET as u64 / xfer_core::unstable::rdm::credit::ENTRY_COST;
    assert!(most_entries > 0, "requests arrived");
    assert!(
        most_entries <= cap,
        "receiver kept {most_entries} unmatched messages, more than the {cap} its credit pays for"
    );
    assert!(counter(&tx, "credit_waits").unwrap() > 0, "requests waited for credit");
    // The small message went behind the waiting requests: not there yet.
    rx.ep.trecv(from_tx, 6, 0, vec![0; 8], 1 << 40).unwrap();
    rx.poll();
    assert!(
        rx.take(1 << 40).is_none(),
        "the small message overtook waiting requests"
    );
    for i in 0..requests {
        rx.ep.trecv(from_tx, 5, 0, vec![0; BIG], 100_000 + i).unwrap();
    }
    for i in 0..requests {
        let c = expect(&mut [&mut tx, &mut rx], 1, 100_000 + i);
        assert_eq!(c.result, Ok(()), "message {i}");
        assert!(c.buf.unwrap() == pattern(BIG, i), "message {i} intact and in order");
    }
    let c = expect(&mut [&mut tx, &mut rx], 1, 1 << 40);
    assert!(c.buf.unwrap() == pattern(8, 1), "the small message behind them");
    for i in 0..=requests {
        assert_eq!(expect(&mut [&mut tx, &mut rx], 0, i).result, Ok(()), "send {i}");
    }
    assert_eq!(counter(&rx, "unexpected_entries"), Some(0));
}

#[test]
fn injects_meet_again_at_the_credit_and_resume_after_receives() {
    let Some((mut tx, mut rx, to_rx, from_tx)) = pair() else {
        return;
    };
    let mut sent = 0u64;
    let limit = 10 * (BUDGET / MSG) as u64;
    loop {
        match tx.ep.tinject(to_rx, 9, &pattern(MSG, sent)) {
            Ok(()) => sent += 1,
            Err(Error::Again) => {
                // Out of credit for now (over verbs, possibly only of the
                // initial credit while connecting): after both sides
                // progress, still out of it while nothing is received?
                let most = churn(&mut tx, &mut rx, Duration::from_millis(200));
                assert!(most <= BUDGET as u64, "receiver held {most} B");
                match tx.ep.tinject(to_rx, 9, &pattern(MSG, sent)) {
                    Ok(()) => sent += 1,
                    Err(Error::Again) => break,
                    Err(e) => panic!("inject {sent}: {e}"),
                }
            }
            Err(e) => panic!("inject {sent}: {e}"),
        }
        tx.poll();
        rx.poll();
        assert!(sent < limit, "{sent} injects and no Again: nothing bounds the sender");
    }
    assert!(sent > 0);

    for i in 0..sent {
        rx.ep.trecv(from_tx, 9, 0, vec![0; MSG], i).unwrap();
        let c = expect(&mut [&mut tx, &mut rx], 1, i);
        assert!(
            c.buf.unwrap() == pattern(MSG, i),
            "inject {i} arrived intact and in order"
        );
    }
    // The credit came back: injecting works again.
    let start = Instant::now();
    while tx.ep.tinject(to_rx, 9, &pattern(MSG, sent)) == Err(Error::Again) {
        tx.poll();
        rx.poll();
        assert!(start.elapsed() < common::DEADLINE, "credit never returned");
    }
    rx.ep.trecv(from_tx, 9, 0, vec![0; MSG], sent).unwrap();
    let c = expect(&mut [&mut tx, &mut rx], 1, sent);
    assert!(c.buf.unwrap() == pattern(MSG, sent));
}
