//! The engine fed a hostile peer's frames (fuzz target `rdm_frames`,
//! docs/FUZZING.md): one endpoint over the in-memory transport with what a
//! peer's frames can touch set up — tagged and untagged receives posted, a
//! rendezvous send, an acknowledged send and an RMA read of its own waiting
//! on that peer, a registered region framed by guard bytes (RMA and atomic
//! frames naming key 1 reach it) — then, after the peer's `Admitted`, every
//! frame of the input arrives on the peer's connection. Properties: no
//! panic, nothing written outside the region (the guards are checked), and
//! the endpoint still closes cleanly.

use std::collections::VecDeque;

use crate::addr::{Address, AvTable, PeerAddr};
use crate::attr::EndpointAttr;
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::mr::keys::KeyTable;
use crate::mr::Access;
use crate::provider::{CompletionLevel, Ctx, DomainProvider, EndpointProvider, RecvOp, RmaKind, RmaOp, SendOp};
use crate::sink::Sink;
use crate::tag::RecvSpec;

use super::super::transport::{Event, Events, Transport};
use super::mem::Net;
use super::wire::{Kind, LEN};
use super::Engine;

const ID: u8 = 0x7e;
const GUARD: usize = 64;
const REGION: usize = 4096;

struct Keys(KeyTable);

impl DomainProvider for Keys {
    fn name(&self) -> &'static str {
        "fuzz"
    }
    fn check_address(&self, bytes: &[u8]) -> Result<Address> {
        Address::new(bytes)
    }
    fn open_endpoint(&mut self, _: &EndpointAttr) -> Result<Box<dyn EndpointProvider>> {
        Err(Error::NotSupported("fuzz domain"))
    }
    fn provider_id(&self) -> u8 {
        ID
    }
    fn remote_target(&self, key: u64, addr: u64, len: u64, access: Access) -> Result<*mut u8> {
        self.0.target(key, addr, len, access)
    }
}

/// Splits fuzz input into frames: records of a 56-byte header, a payload
/// length (u16 LE, at most 2 KiB) and the payload.
pub fn frames(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= LEN + 2 {
        let (h, r) = rest.split_at(LEN);
        let n = (usize::from(u16::from_le_bytes([r[0], r[1]]))) % 2048;
        let r = &r[2..];
        let n = n.min(r.len());
        out.push((h.to_vec(), r[..n].to_vec()));
        rest = &r[n..];
    }
    out
}

/// The input `frames` reads back as these frames (seeds).
pub fn encode(frames: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (h, p) in frames {
        let mut h = h.clone();
        h.resize(LEN, 0);
        out.extend_from_slice(&h);
        out.extend_from_slice(&(p.len().min(2047) as u16).to_le_bytes());
        out.extend_from_slice(&p[..p.len().min(2047)]);
    }
    out
}

/// The tokens of the endpoint's own operations waiting on the peer: the
/// rendezvous send, the acknowledged send, the RMA read.
pub const TOKENS: [u64; 3] = [1 << 32, (2 << 32) | 1, 1 << 32];

/// Runs the engine against `frames` from one peer (see the module docs).
pub fn run(frames: &[(Vec<u8>, Vec<u8>)]) {
    let net = Net::new(1 << 16);
    let attr = EndpointAttr {
        rndv_threshold: 512,
        inject_size: 256,
        rma_events: true,
        peer_events: 4,
        ..EndpointAttr::default()
    };
    let mut ep = Engine::new(net.open(false), ID, &attr, 1 << 20).expect("engine");
    let mut hostile = net.open(false);
    let mut av = AvTable::default();
    let mut peer_name = vec![ID];
    peer_name.extend_from_slice(hostile.address());
    let peer = av.insert(Address::new(&peer_name).expect("name"));
    let mut keys = Keys(KeyTable::default());
    let mut memory = vec![0xA5u8; REGION + 2 * GUARD];
    let base = memory[GUARD..].as_mut_ptr() as usize;
    let key = keys.0.insert(base, REGION, Access::all()).expect("register").key;
    let mut done: VecDeque<Completion> = VecDeque::new();
    let mut with = |ep: &mut Engine<super::mem::Mem>, f: &mut dyn FnMut(&mut Engine<super::mem::Mem>, &mut Ctx<'_>)| {
        let mut none: [Completion; 0] = [];
        let mut filled = 0;
        let mut cx = Ctx {
            cq: Sink::new(&mut none, &mut filled, &mut done),
            av: &av,
            domain: &keys,
        };
        f(ep, &mut cx);
    };
    with(&mut ep, &mut |ep, cx| {
        for (i, tagged) in [(1u64, true), (2, false), (3, true)] {
            let op = RecvOp {
                spec: RecvSpec {
                    src: if i == 3 { peer } else { PeerAddr::UNSPEC },
                    tag: 7,
                    ignore: 0,
                },
                tagged,
                buf: vec![0; 300].into(),
                context: i,
            };
            let _ = ep.recv(cx, op);
        }
        for (ctx, len, level) in [
            (10u64, 4000usize, CompletionLevel::Inject),
            (11, 64, CompletionLevel::Delivery),
        ] {
            let op = SendOp {
                peer,
                tag: Some(7),
                data: None,
                buf: vec![1; len].into(),
                context: ctx,
                completion: true,
                level,
            };
            let _ = ep.send(cx, op);
        }
        let read = RmaOp {
            peer,
            kind: RmaKind::Read,
            buf: vec![0; 100].into(),
            addr: 0x1000,
            key: 5,
            data: None,
            context: 12,
            completion: true,
        };
        let _ = ep.rma(cx, read);
    });
    // The hostile side accepts the connection the sends made (taking the
    // endpoint's frames) and answers on it with the input's frames; an RMA
    // or atomic frame naming key 1 and a small address gets the region's real key and
    // address, so the target's checks are reached past the key.
    hostile.progress(&mut Ignore);
    if let Some(conn) = hostile.conns().first().copied() {
        // Admitted first, as an honest acceptor does: the endpoint's queued
        // frames go out and the input meets an open connection.
        hostile.send_raw(conn, &super::wire::Header::new(Kind::Admitted).encode(), &[]);
        for (h, p) in frames {
            let mut h = h.clone();
            let targets_region = [Kind::RmaWrite, Kind::RmaRead, Kind::Atomic]
                .iter()
                .any(|k| h.first() == Some(&(*k as u8)));
            if h.len() == LEN && targets_region {
                let word = |h: &[u8], i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
                if word(&h, 8) == 1 {
                    h[8..16].copy_from_slice(&key.to_le_bytes());
                    let addr = word(&h, 40);
                    if addr < 2 * REGION as u64 {
                        h[40..48].copy_from_slice(&(base as u64 + addr).to_le_bytes());
                    }
                }
            }
            hostile.send_raw(conn, &h, p);
        }
    }
    for _ in 0..4 {
        with(&mut ep, &mut |ep, cx| ep.progress(cx));
    }
    with(&mut ep, &mut |ep, cx| ep.close(cx));
    assert!(
        memory[..GUARD]
            .iter()
            .chain(&memory[GUARD + REGION..])
            .all(|&b| b == 0xA5),
        "bytes written outside the registered region"
    );
}

/// Takes every event and reads every frame.
struct Ignore;

impl Events for Ignore {
    fn event(&mut self, _: Event<'_>) {}
}
