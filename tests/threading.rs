//! `DomainAttr::threading`: a `single` domain carries messages on the
//! thread that opened it, refuses every call from another thread with a
//! clear error (no data lost: the refused operation comes back), and a
//! handle dropped on another thread leaves the domain working; a `safe`
//! domain (the default) serves any thread.

mod common;

use common::{expect, pattern, test_attr, Node};
use xfer::{DomainAttr, Error, Threading};

fn node(threading: Threading) -> Node {
    xfer::init_logging();
    let mut attr = DomainAttr::from_env();
    attr.threading = threading;
    let domain = xfer::open(&attr).expect("open domain");
    assert_eq!(domain.threading(), threading);
    Node::in_domain(domain, &test_attr())
}

/// One tagged message from `a` to `b` (contexts `ctx`, `ctx + 1`), checked.
fn exchange(a: &mut Node, b: &mut Node, ctx: u64) {
    let to_b = a.add(b);
    let payload = pattern(100, ctx);
    b.ep.trecv(xfer::PeerAddr::UNSPEC, 9, 0, vec![0; 100], ctx + 1)
        .expect("trecv");
    a.ep.tsend(to_b, 9, payload.clone(), ctx).expect("tsend");
    let got = expect(&mut [&mut *a, &mut *b], 1, ctx + 1);
    got.result.clone().expect("receive");
    assert_eq!(got.buf.as_ref().map(|b| &b.as_slice()[..got.len]), Some(&payload[..]));
    expect(&mut [a, b], 0, ctx).result.expect("send");
}

#[test]
fn a_single_domain_works_on_its_thread_and_refuses_others() {
    let (mut a, mut b) = (node(Threading::Single), node(Threading::Single));
    exchange(&mut a, &mut b, 10);
    let peer = a.add(&b);
    std::thread::scope(|s| {
        s.spawn(|| {
            let refused = a.ep.tsend(peer, 9, vec![7; 64], 20).expect_err("another thread's send");
            assert!(matches!(refused.error, Error::InvalidArgument(_)), "{}", refused.error);
            assert_eq!(refused.op, vec![7; 64], "the refused send comes back whole");
            let mut out = vec![xfer::Completion::EMPTY; 4];
            let e = a.cq.poll(&mut out).expect_err("another thread's poll");
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            let e =
                a.av.insert(b.ep.name().as_bytes())
                    .expect_err("another thread's insert");
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        });
    });
    // Still whole on its own thread.
    exchange(&mut a, &mut b, 30);
}

#[test]
fn a_handle_dropped_on_another_thread_leaves_a_single_domain_working() {
    let (mut a, mut b) = (node(Threading::Single), node(Threading::Single));
    let extra = a.domain.cq(&xfer::CqAttr::default()).expect("a second cq");
    let region = a
        .domain
        .register(vec![1u8; 4096], xfer::Access::REMOTE_READ)
        .expect("register");
    std::thread::spawn(move || {
        drop(extra);
        drop(region);
    })
    .join()
    .expect("dropping thread");
    exchange(&mut a, &mut b, 40);
}

#[test]
fn a_safe_domain_serves_any_thread() {
    let (mut a, mut b) = (node(Threading::Safe), node(Threading::Safe));
    let peer = a.add(&b);
    b.ep.trecv(xfer::PeerAddr::UNSPEC, 9, 0, vec![0; 64], 51)
        .expect("trecv");
    std::thread::scope(|s| {
        s.spawn(|| a.ep.tsend(peer, 9, vec![3; 64], 50).expect("another thread's send"));
    });
    let got = expect(&mut [&mut a, &mut b], 1, 51);
    assert_eq!(got.result, Ok(()));
    assert_eq!(got.len, 64);
}

#[test]
fn threading_comes_from_the_environment_and_is_listed() {
    let listed = DomainAttr::from_env().settings();
    let s = listed
        .iter()
        .find(|s| s.env == "XFER_THREADING")
        .expect("XFER_THREADING listed");
    // A value that does not parse is ignored (and logged): the default.
    let want = std::env::var("XFER_THREADING")
        .ok()
        .and_then(|v| v.parse::<Threading>().ok())
        .unwrap_or_default();
    assert_eq!(s.value, want.to_string());
}

/// `serialized` (the plug-in's mode for `FI_THREAD_DOMAIN`) is refused by the
/// safe open, whatever the provider; through `open_serialized` it carries
/// messages from one thread and then another, one call at a time.
#[test]
fn a_serialized_domain_needs_the_unsafe_open_and_then_serves_any_thread_in_turn() {
    let mut attr = DomainAttr::from_env();
    attr.threading = Threading::Serialized;
    assert!(
        matches!(xfer::open(&attr), Err(Error::InvalidArgument(_))),
        "the safe open refuses serialized"
    );
    let open = || {
        // SAFETY: this test makes every call into the domain from one thread
        // at a time (the spawned thread is joined before the next call).
        let domain = unsafe { xfer::open_serialized(&DomainAttr::from_env()) }.expect("open");
        assert_eq!(domain.threading(), Threading::Serialized);
        Node::in_domain(domain, &test_attr())
    };
    let (mut a, mut b) = (open(), open());
    exchange(&mut a, &mut b, 10);
    let (a, b) = std::thread::spawn(move || {
        exchange(&mut a, &mut b, 20);
        (a, b)
    })
    .join()
    .expect("another thread, after the first");
    let (mut a, mut b) = (a, b);
    exchange(&mut a, &mut b, 30);
}
