//! Deterministic teardown (issue 10): an endpoint with thousands of
//! operations in flight, torn down by dropping its objects (domain,
//! completion queue, address vector, async endpoint, dispatcher) in every
//! one of the 120 orders, over the default provider (TCP on the host; the
//! Soft-RoCE guest's `teardown` step runs it over verbs).
//!
//! In flight when the teardown starts, on side `a`:
//! - 1,000 raw tagged receives nothing matches;
//! - 1,000 raw eager tagged sends to a peer that posts no receive (the peer
//!   holds them as unexpected messages), some still queued;
//! - 48 raw rendezvous sends (256 KiB) waiting for receives never posted;
//! - 64 async rendezvous sends whose futures were polled once and dropped
//!   (abandoned: the dispatcher frees their buffers at their completion),
//!   and 100 async receives dropped after posting (cancelled).
//!
//! Checked for every order: each drop returns within [`DROP_LIMIT`]; when
//! the endpoint goes while its queue (or the dispatcher holding it) is still
//! there, every raw operation has turned into exactly one completion, and
//! with the dispatcher there, no async operation is left in flight. The
//! test binary's allocator poisons freed memory, so a buffer freed while the
//! transport still used it would corrupt the peer's data or a later
//! allocation rather than go unnoticed.

mod common;

use common::poison::{noop_waker, poll_once, Poison};

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use xfer::aio::{self, AsyncEndpoint, Dispatcher};
use xfer::{Completion, CompletionQueue};

#[global_allocator]
static ALLOC: Poison = Poison;

const RAW_RECVS: u64 = 1000;
const RAW_SENDS: u64 = 1000;
const RAW_LARGE: u64 = 48;
const RAW_OPS: u64 = RAW_RECVS + RAW_SENDS + RAW_LARGE;
const ASYNC_LARGE: u64 = 64;
const ASYNC_RECVS: u64 = 100;
/// Above the TCP provider's default rendezvous threshold (64 KiB).
const LARGE: usize = 256 * 1024;
/// How long one drop may take.
const DROP_LIMIT: Duration = Duration::from_secs(5);

/// The objects of side `a`, each dropped at its turn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Obj {
    Domain,
    Cq,
    Av,
    Endpoint,
    Dispatcher,
}

const OBJS: [Obj; 5] = [Obj::Domain, Obj::Cq, Obj::Av, Obj::Endpoint, Obj::Dispatcher];

/// Every order of `items`.
fn permutations(items: &[Obj]) -> Vec<Vec<Obj>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first);
            out.push(p);
        }
    }
    out
}

/// Side `a`'s objects, as `Option`s so that each can be dropped alone.
struct SideA {
    domain: Option<xfer::Domain>,
    cq: Option<CompletionQueue>,
    av: Option<xfer::AddressVector>,
    ep: Option<AsyncEndpoint>,
    disp: Option<Arc<Dispatcher>>,
}

/// Counts raw completions (contexts `0..RAW_OPS`), each at most once.
struct Seen(Vec<bool>, u64);

impl Seen {
    fn add(&mut self, c: &Completion) {
        let i = c.context as usize;
        assert!(i < self.0.len(), "a raw completion with context {:#x}", c.context);
        assert!(!self.0[i], "two completions for raw operation {i}");
        self.0[i] = true;
        self.1 += 1;
    }
}

/// Takes every completion available: through the dispatcher if there is
/// one (its raw stream), else from the queue.
fn take(a: &SideA, seen: &mut Seen) {
    if let Some(d) = &a.disp {
        let waker = noop_waker();
        let mut cx = Context::from_waker(&waker);
        while let Poll::Ready(r) = d.poll_completion(&mut cx) {
            seen.add(&r.expect("raw completion"));
        }
    } else if let Some(cq) = &a.cq {
        let mut batch = [Completion::EMPTY; 64];
        loop {
            let n = cq.poll(&mut batch).expect("poll");
            if n == 0 {
                break;
            }
            for c in &batch[..n] {
                // Completions of abandoned async sends: their buffers go with them.
                if c.context & !((1 << 48) - 1) != aio::CONTEXT_TAG {
                    seen.add(c);
                }
            }
        }
    }
}

fn open_side() -> (xfer::Domain, CompletionQueue, xfer::AddressVector, xfer::Endpoint) {
    let domain = xfer::open_default().expect("domain");
    let cq = domain.cq(&xfer::CqAttr::default()).expect("cq");
    let av = domain.av().expect("av");
    let ep = domain.endpoint(&cq, &av, &common::test_attr()).expect("endpoint");
    (domain, cq, av, ep)
}

/// Side `a` with every kind of operation in flight toward a passive `b`.
fn loaded_pair() -> (
    SideA,
    (xfer::Domain, CompletionQueue, xfer::AddressVector, xfer::Endpoint),
) {
    let (domain, cq, av, ep) = open_side();
    let b = open_side();
    let pb = av.insert(b.3.name().as_bytes()).expect("insert b");
    b.2.insert(ep.name().as_bytes()).expect("insert a");
    let disp = aio::tokio::dispatcher(&cq).expect("dispatcher");
    let ep = AsyncEndpoint::new(ep, disp.clone()).expect("async endpoint");
    let raw = ep.endpoint();
    let mut cx = 0u64;
    for i in 0..RAW_RECVS {
        raw.trecv(pb, 1 << 40 | i, 0, vec![0; 64], cx).expect("raw trecv");
        cx += 1;
    }
    for i in 0..RAW_SENDS {
        raw.tsend(pb, 2 << 40 | i, vec![i as u8; 256], cx).expect("raw tsend");
        cx += 1;
    }
    for i in 0..RAW_LARGE {
        raw.tsend(pb, 3 << 40 | i, vec![i as u8; LARGE], cx)
            .expect("raw large tsend");
        cx += 1;
    }
    for i in 0..ASYNC_LARGE {
        let mut f = Box::pin(ep.tsend(pb, 4 << 40 | i, vec![i as u8; LARGE]));
        assert!(
            poll_once(&mut f).is_pending(),
            "a rendezvous send completed with no receive"
        );
    }
    for i in 0..ASYNC_RECVS {
        let mut f = Box::pin(ep.trecv(pb, 5 << 40 | i, 0, vec![0; 64]));
        assert!(poll_once(&mut f).is_pending(), "a receive matched with nothing sent");
    }
    // Some progress both ways: eager sends reach b's unexpected queue.
    let mut batch = [Completion::EMPTY; 64];
    for _ in 0..20 {
        disp.drive().expect("drive a");
        b.1.poll(&mut batch).expect("poll b");
    }
    assert!(
        disp.abandoned() >= ASYNC_LARGE as usize,
        "abandoned sends: {}",
        disp.abandoned()
    );
    let a = SideA {
        domain: Some(domain),
        cq: Some(cq),
        av: Some(av),
        ep: Some(ep),
        disp: Some(disp),
    };
    (a, b)
}

#[tokio::test(flavor = "current_thread")]
async fn every_drop_order_with_thousands_in_flight_is_bounded_and_completes_every_operation() {
    xfer::init_logging();
    let orders = permutations(&OBJS);
    assert_eq!(orders.len(), 120);
    let mut counted = 0;
    for order in &orders {
        let (mut a, b) = loaded_pair();
        let mut seen = Seen(vec![false; RAW_OPS as usize], 0);
        take(&a, &mut seen);
        for &obj in order {
            let start = Instant::now();
            match obj {
                Obj::Domain => drop(a.domain.take()),
                Obj::Cq => drop(a.cq.take()),
                Obj::Av => drop(a.av.take()),
                Obj::Endpoint => drop(a.ep.take()),
                Obj::Dispatcher => drop(a.disp.take()),
            }
            let took = start.elapsed();
            assert!(took < DROP_LIMIT, "order {order:?}: dropping {obj:?} took {took:?}");
            if obj == Obj::Endpoint && (a.cq.is_some() || a.disp.is_some()) {
                // Closed: every raw operation has its completion in the queue.
                take(&a, &mut seen);
                assert_eq!(
                    seen.1, RAW_OPS,
                    "order {order:?}: raw operations with a completion after the endpoint closed"
                );
                if let Some(d) = &a.disp {
                    // And the async operations': no buffer is left with the transport.
                    assert_eq!(
                        d.in_flight(),
                        0,
                        "order {order:?}: async operations left after the close"
                    );
                }
                counted += 1;
            }
        }
        let start = Instant::now();
        drop(b);
        assert!(
            start.elapsed() < DROP_LIMIT,
            "order {order:?}: dropping the peer took {:?}",
            start.elapsed()
        );
    }
    // The endpoint goes before the queue or the dispatcher in 80 of the 120 orders.
    assert_eq!(counted, 80);
}
