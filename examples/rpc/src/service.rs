//! The service the example, its test and its benchmark run: tarpc's own
//! macro, serve loop and client, unmodified; only the transport is xfer's.

use std::io;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use serde_bytes::ByteBuf;
use tarpc::server::{BaseChannel, Channel};
use tarpc::{context, ClientMessage, Response};
use tokio::task::JoinSet;

/// A small calculator: echo, add, sum.
#[tarpc::service]
pub trait Calc {
    /// Returns `data` unchanged.
    async fn echo(data: ByteBuf) -> ByteBuf;
    /// `a + b`, wrapping.
    async fn add(a: u64, b: u64) -> u64;
    /// The sum of the bytes of `data`.
    async fn sum(data: ByteBuf) -> u64;
}

/// The server side of [`Calc`].
#[derive(Clone, Copy, Debug)]
pub struct CalcServer;

impl Calc for CalcServer {
    async fn echo(self, _: context::Context, data: ByteBuf) -> ByteBuf {
        data
    }

    async fn add(self, _: context::Context, a: u64, b: u64) -> u64 {
        a.wrapping_add(b)
    }

    async fn sum(self, _: context::Context, data: ByteBuf) -> u64 {
        data.iter().map(|&b| u64::from(b)).sum()
    }
}

/// What the server side of a connection carries.
pub type ServerIn = ClientMessage<CalcRequest>;
/// What the server side of a connection sends.
pub type ServerOut = Response<CalcResponse>;

/// Serves every connection `incoming` yields, each in a task of its own,
/// with tarpc's `BaseChannel`; after `conns` connections (if given), stops
/// accepting and returns once those have ended. Accept errors are logged,
/// unless `incoming` ends.
pub async fn serve<S, T>(incoming: S, conns: Option<usize>)
where
    S: Stream<Item = io::Result<T>>,
    T: tarpc::Transport<ServerOut, ServerIn> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let mut incoming = std::pin::pin!(incoming);
    let mut accepted = 0;
    while conns.is_none_or(|n| accepted < n) {
        match incoming.next().await {
            Some(Ok(transport)) => {
                accepted += 1;
                tasks.spawn(
                    BaseChannel::with_defaults(transport)
                        .execute(CalcServer.serve())
                        .for_each(|call| async {
                            tokio::spawn(call);
                        }),
                );
            }
            Some(Err(e)) => tracing::warn!(error = %e, "rpc: accepting a connection"),
            None => break,
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// A context whose deadline is far enough for a 1 MiB call in an emulated
/// guest (tarpc's default is 10 s).
pub fn ctx() -> context::Context {
    let mut c = context::current();
    c.deadline = Instant::now() + Duration::from_secs(120);
    c
}

/// `len` bytes of a pattern that names `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 131 + i * 7 + i / 251) as u8)
        .collect()
}

/// Payload sizes the check sends: around the frame size (4 KiB) and up to 1 MiB.
pub const SIZES: [usize; 12] = [0, 1, 7, 100, 1000, 4000, 4096, 4097, 10_000, 65_536, 262_144, 1 << 20];

/// Calls every method with results checked: `add` on edge values, `echo`
/// and `sum` of every size in [`SIZES`], then 256 mixed calls with 64
/// outstanding. Returns how many calls were made.
pub async fn check(client: &CalcClient) -> Result<u64, String> {
    let mut calls = 0u64;
    for (a, b) in [(0, 0), (1, 2), (u64::MAX, 2), (12_345_678_901, 98_765_432_109)] {
        let got = client.add(ctx(), a, b).await.map_err(|e| format!("add: {e}"))?;
        if got != a.wrapping_add(b) {
            return Err(format!("add({a}, {b}) = {got}"));
        }
        calls += 1;
    }
    for (i, len) in SIZES.into_iter().enumerate() {
        echo_and_sum(client, i as u64, len).await?;
        calls += 2;
    }
    let mut outstanding = futures::stream::iter(0..256u64)
        .map(|i| async move {
            let len = SIZES[i as usize % SIZES.len()].min(65_536);
            match i % 3 {
                0 => echo_and_sum(client, i, len).await.map(|()| 2),
                _ => match client.add(ctx(), i, i * i).await {
                    Ok(got) if got == i + i * i => Ok(1),
                    Ok(got) => Err(format!("add({i}, {}) = {got}", i * i)),
                    Err(e) => Err(format!("add: {e}")),
                },
            }
        })
        .buffer_unordered(64);
    while let Some(r) = outstanding.next().await {
        calls += r?;
    }
    Ok(calls)
}

async fn echo_and_sum(client: &CalcClient, seed: u64, len: usize) -> Result<(), String> {
    let data = pattern(seed, len);
    let back = client
        .echo(ctx(), ByteBuf::from(data.clone()))
        .await
        .map_err(|e| format!("echo of {len} bytes: {e}"))?;
    if back.as_slice() != data.as_slice() {
        return Err(format!(
            "echo of {len} bytes came back different ({} bytes)",
            back.len()
        ));
    }
    let want: u64 = data.iter().map(|&b| u64::from(b)).sum();
    let got = client
        .sum(ctx(), ByteBuf::from(data))
        .await
        .map_err(|e| format!("sum of {len} bytes: {e}"))?;
    if got != want {
        return Err(format!("sum of {len} bytes = {got}, expected {want}"));
    }
    Ok(())
}
