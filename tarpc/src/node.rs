//! One xfer endpoint of a process, and RPC connections over it: `connect`
//! on the client, `accept`/`incoming` on the server.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use futures::Stream;
use xfer::aio::{self, AsyncEndpoint};
use xfer::{Address, PeerAddr};

use crate::codec::Raw;
use crate::transport::Transport;
use crate::wire::{self, ACCEPT, CONN_MAX, FRAME_MAX, HELLO, KIND_ONLY, VERSION};

/// How long `connect` waits for the server's `ACCEPT`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The TCP transport's setting that holds eager frames posted in a burst
/// for the next progress, and its environment variable.
const COALESCE: &str = "tcp.coalesce";
const COALESCE_ENV: &str = "XFER_TCP_COALESCE";

/// A process's xfer endpoint (domain, completion queue with its async
/// dispatcher, address vector), shared by all its RPC connections, which
/// the tags tell apart ([`crate::wire`]).
///
/// A task of its own drives the endpoint whenever its descriptor fires,
/// while the node lives: sends whose futures were dropped (a transport
/// dropped or closed without waiting for its sends, as a byte stream's
/// drop does) are still written and completed with no operation of the
/// process waiting on the endpoint.
pub struct Node {
    ep: Arc<AsyncEndpoint>,
    domain: xfer::Domain,
    next_conn: AtomicU32,
    progress: tokio::task::JoinHandle<()>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.progress.abort();
    }
}

impl Node {
    /// Opens the default provider (`XFER_PROVIDER`) with attributes from
    /// the `XFER_*` environment; call within a tokio runtime.
    pub fn open() -> xfer::Result<Arc<Node>> {
        Self::open_with(&xfer::DomainAttr::from_env())
    }

    /// Opens the provider `attr` chooses (`DomainAttr::with_provider("shm")`
    /// for same-host peers over shared memory, whatever `XFER_PROVIDER`
    /// says), endpoint and queue attributes from the `XFER_*` environment;
    /// call within a tokio runtime.
    ///
    /// Over TCP the endpoint writes each frame when it is posted
    /// (`tcp.coalesce` 0) unless `attr`'s params or `XFER_TCP_COALESCE`
    /// say otherwise: a connection batches its messages into frames itself,
    /// and a flush waits for its frames' sends, so a frame held for the
    /// next progress only delays that flush and costs a wake-up.
    pub fn open_with(attr: &xfer::DomainAttr) -> xfer::Result<Arc<Node>> {
        let domain = xfer::open(attr)?;
        let cq = domain.cq(&xfer::CqAttr::from_env())?;
        let av = domain.av()?;
        let attr = endpoint_attr(attr);
        // A provider whose frames are smaller than a frame of ours refuses
        // that inject size: its endpoint keeps the one asked for.
        let ep = match domain.endpoint(&cq, &av, &inject_frames(&attr)) {
            Err(xfer::Error::InvalidArgument(_)) => domain.endpoint(&cq, &av, &attr)?,
            ep => ep?,
        };
        let ep = Arc::new(AsyncEndpoint::new(ep, aio::tokio::dispatcher(&cq)?)?);
        let disp = ep.dispatcher().clone();
        let progress = tokio::spawn(async move {
            let e = disp.progress().await;
            tracing::debug!(error = %e, "rpc: the endpoint's progress task ended");
        });
        Ok(Arc::new(Node {
            ep,
            domain,
            next_conn: AtomicU32::new(1),
            progress,
        }))
    }

    /// The endpoint's name, which clients give [`connect`](Self::connect).
    pub fn name(&self) -> Vec<u8> {
        self.ep.endpoint().name().as_bytes().to_vec()
    }

    /// The provider the domain opened (`tcp`, `verbs`, `shm`).
    pub fn provider(&self) -> &'static str {
        self.domain.provider()
    }

    /// The async endpoint, for its dispatcher's counts.
    pub fn endpoint(&self) -> &Arc<AsyncEndpoint> {
        &self.ep
    }

    fn conn_id(&self) -> io::Result<u32> {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        if id == 0 || id > CONN_MAX {
            return Err(io::Error::other("connection ids exhausted"));
        }
        Ok(id)
    }

    /// Opens a connection to the server whose endpoint name is `server`:
    /// sends a `HELLO`, waits for the `ACCEPT`. Messages are encoded with
    /// bincode, as tarpc's TCP transport does.
    pub async fn connect<In, Out>(&self, server: &[u8]) -> io::Result<Transport<In, Out>> {
        self.connect_with(server).await
    }

    /// [`connect`](Self::connect) for byte strings sent as they are
    /// ([`Raw`]): the server must take the connection with
    /// [`accept_raw`](Self::accept_raw) or [`incoming_raw`](Self::incoming_raw).
    pub async fn connect_raw(&self, server: &[u8]) -> io::Result<Transport<Vec<u8>, Vec<u8>, Raw>> {
        self.connect_with(server).await
    }

    async fn connect_with<In, Out, C>(&self, server: &[u8]) -> io::Result<Transport<In, Out, C>> {
        let peer = self.ep.endpoint().av().insert(server)?;
        let local = self.conn_id()?;
        let mut hello = vec![VERSION];
        hello.extend_from_slice(&local.to_le_bytes());
        hello.extend_from_slice(&self.name());
        let accept = self
            .ep
            .trecv(PeerAddr::UNSPEC, wire::tag(ACCEPT, local, 0), 0, vec![0; 4]);
        let hello = self.ep.tsend(peer, wire::tag(HELLO, 0, 0), hello);
        // The receive is polled, so posted, before the hello; a hello that
        // fails (no server at that name) ends the wait at once.
        let both = async {
            futures::pin_mut!(accept, hello);
            match futures::future::select(accept, hello).await {
                Either::Left(((got, buf), hello)) => {
                    hello.await.0?;
                    io::Result::Ok((got, buf))
                }
                Either::Right(((sent, _), accept)) => {
                    sent?;
                    Ok(accept.await)
                }
            }
        };
        let (got, buf) = tokio::time::timeout(CONNECT_TIMEOUT, both)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no ACCEPT from the server"))??;
        let got = got?;
        let remote = buf[..got.len]
            .first_chunk::<4>()
            .map(|b| u32::from_le_bytes(*b))
            .filter(|&id| id != 0 && id <= CONN_MAX)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed ACCEPT"))?;
        tracing::debug!(local, remote, "rpc connection open");
        Ok(Transport::new(self.ep.clone(), peer, local, remote))
    }

    /// Waits for the next client's `HELLO`, answers it and returns the
    /// connection, its messages encoded with bincode. Malformed hellos are
    /// logged and skipped.
    pub async fn accept<In, Out>(&self) -> io::Result<Transport<In, Out>> {
        self.accept_with().await
    }

    /// [`accept`](Self::accept) for clients that connected with
    /// [`connect_raw`](Self::connect_raw).
    pub async fn accept_raw(&self) -> io::Result<Transport<Vec<u8>, Vec<u8>, Raw>> {
        self.accept_with().await
    }

    async fn accept_with<In, Out, C>(&self) -> io::Result<Transport<In, Out, C>> {
        loop {
            let (got, buf) = self
                .ep
                .trecv(
                    PeerAddr::UNSPEC,
                    wire::tag(HELLO, 0, 0),
                    KIND_ONLY,
                    vec![0; 5 + Address::MAX_LEN],
                )
                .await;
            let hello = match got {
                Ok(got) => &buf[..got.len],
                Err(xfer::Error::Truncated { .. }) => {
                    tracing::warn!("rpc: a HELLO too long; ignored");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let Some((&VERSION, rest)) = hello.split_first() else {
                tracing::warn!("rpc: a HELLO of another version; ignored");
                continue;
            };
            let Some((remote, name)) = rest.split_first_chunk::<4>() else {
                tracing::warn!("rpc: a short HELLO; ignored");
                continue;
            };
            let remote = u32::from_le_bytes(*remote);
            let peer = match self.ep.endpoint().av().insert(name) {
                Ok(p) if remote != 0 && remote <= CONN_MAX => p,
                Ok(_) => {
                    tracing::warn!(remote, "rpc: a HELLO with a bad connection id; ignored");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "rpc: a HELLO with a bad endpoint name; ignored");
                    continue;
                }
            };
            let local = self.conn_id()?;
            let (sent, _) = self
                .ep
                .tsend(peer, wire::tag(ACCEPT, remote, 0), local.to_le_bytes().to_vec())
                .await;
            if let Err(e) = sent {
                tracing::warn!(error = %e, "rpc: answering a HELLO failed");
                continue;
            }
            tracing::debug!(local, remote, "rpc connection accepted");
            return Ok(Transport::new(self.ep.clone(), peer, local, remote));
        }
    }

    /// [`accept`](Self::accept) as a stream of connections, as tarpc's
    /// TCP listener gives them.
    pub fn incoming<In, Out>(self: Arc<Self>) -> impl Stream<Item = io::Result<Transport<In, Out>>> {
        futures::stream::unfold(self, |node| async move {
            let conn = node.accept().await;
            Some((conn, node))
        })
    }

    /// [`accept_raw`](Self::accept_raw) as a stream of connections.
    pub fn incoming_raw(self: Arc<Self>) -> impl Stream<Item = io::Result<Transport<Vec<u8>, Vec<u8>, Raw>>> {
        futures::stream::unfold(self, |node| async move {
            let conn = node.accept_raw().await;
            Some((conn, node))
        })
    }
}

/// `attr` with an inject size of at least a frame ([`FRAME_MAX`]): a byte
/// write sent as a frame of its own goes by the endpoint's vectored inject.
fn inject_frames(attr: &xfer::EndpointAttr) -> xfer::EndpointAttr {
    let mut attr = attr.clone();
    attr.inject_size = attr.inject_size.max(FRAME_MAX);
    attr
}

/// The node's endpoint attributes: the `XFER_*` environment's, with TCP's
/// coalescing off unless the domain's params or the environment set it.
///
/// The engine holds an eager frame posted after another and before the
/// next progress, to write a burst in one `sendmsg`. A connection's frames
/// are already its batches (messages written between two flushes), and a
/// byte stream's flush (hyper's, after each HTTP/2 `DATA` frame) waits for
/// the frame's send: held, that send completes only when a progress writes
/// it, which the post asks for by signalling the endpoint's descriptor, so
/// every other frame cost a wake-up of the dispatcher, a progress and a
/// copy into the connection's send queue.
fn endpoint_attr(domain: &xfer::DomainAttr) -> xfer::EndpointAttr {
    let mut attr = xfer::EndpointAttr::from_env();
    let chosen = domain.params.get(COALESCE).is_some()
        || attr.params.get(COALESCE).is_some()
        || std::env::var_os(COALESCE_ENV).is_some();
    if !chosen {
        attr.params.set(COALESCE, "0");
    }
    attr
}
