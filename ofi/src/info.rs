//! `fi_getinfo`: one `fi_info` per usable xfer provider (verbs when a device
//! is usable, then tcp; shm when it is the one chosen), each refused when
//! the hints ask for something xfer cannot do.

use std::ffi::{c_char, c_int, CStr};
use std::net::{IpAddr, SocketAddr};

use xfer_facade::{Address, AtomicMode, CqAttr, DomainAttr, EndpointAttr};

use crate::addr::{self, Format, Resolved};
use crate::entry::{guard, PANIC};
use crate::fi;
use crate::iov::IOV_LIMIT;
use crate::join::RMA_IOV_LIMIT;

/// The fabric name every fi_info carries.
pub const FABRIC_NAME: &str = "xfer";

/// Primary capabilities: messages and tagged messages.
pub const PRIMARY_CAPS: u64 = fi::FI_MSG | fi::FI_TAGGED;
/// Secondary capabilities xfer offers when they are asked for:
/// `FI_DIRECTED_RECV` changes what a receive's address means,
/// `FI_SOURCE` is a promise about every completion and `FI_SOURCE_ERR`
/// (with `FI_SOURCE` only) turns receives from senders not in the AV into
/// error entries, so none is added unasked (fi_getinfo(3): only
/// capabilities that change nothing for the application may be added).
pub const SECONDARY_CAPS: u64 = fi::FI_SEND
    | fi::FI_RECV
    | fi::FI_DIRECTED_RECV
    | fi::FI_SOURCE
    | fi::FI_SOURCE_ERR
    | fi::FI_MULTI_RECV
    | fi::FI_LOCAL_COMM
    | fi::FI_REMOTE_COMM;
/// Secondary capabilities added whether asked or not: both directions when
/// the application names neither, and both kinds of peer (harmless).
pub const IMPLIED_CAPS: u64 = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
/// RMA (`fi_read`, `fi_write`, `fi_writedata`, `fi_inject_write*` onto
/// xfer's RMA), offered only when asked for: it needs the memory
/// registration mode [`MR_MODE_RMA`].
pub const RMA_CAPS: u64 = fi::FI_RMA | fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE;
/// Remote atomics (`fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`
/// onto xfer's atomics), offered only when asked for and only by a
/// provider whose endpoints apply them ([`Domain::atomics`]); they need the
/// registration mode RMA needs.
///
/// [`Domain::atomics`]: xfer_facade::Domain::atomics
pub const ATOMIC_CAPS: u64 = fi::FI_ATOMIC | fi::FI_READ | fi::FI_WRITE | fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE;
/// Most bytes of error data an entry carries (`max_err_data`): the
/// address of an `FI_SOURCE_ERR` sender, in any address format (an
/// `FI_ADDR_STR` string of an xfer name is the longest: `xfer://`, two hex
/// digits a byte and a NUL).
pub const MAX_ERR_DATA: usize = "xfer://".len() + 2 * xfer_facade::Address::MAX_LEN + 1;
/// Everything an endpoint can be asked for. `FI_RMA_EVENT` (remote
/// counters) only where the target serves RMA itself ([`serves_rma`]), and
/// only when asked: a verbs target never sees the RDMA its NIC applies.
/// `FI_ATOMIC` only where the provider applies atomics.
pub const CAPS: u64 = PRIMARY_CAPS | SECONDARY_CAPS | RMA_CAPS | ATOMIC_CAPS | fi::FI_RMA_EVENT;
/// Registration mode with RMA: remote addresses are virtual addresses, keys
/// are xfer's (`fi_mr_key`), registered memory must be allocated.
/// `FI_MR_LOCAL` is added only when the application lists it (local buffers
/// need no descriptor: xfer registers what it must itself; with it, the
/// data calls use the `desc` they are given, decision 51).
pub const MR_MODE_RMA: u64 = fi::FI_MR_VIRT_ADDR | fi::FI_MR_ALLOCATED | fi::FI_MR_PROV_KEY;
/// Remote keys are 8 bytes.
pub const MR_KEY_SIZE: usize = 8;
/// CQs, counters, endpoints and contexts a domain offers (`domain_attr->*_cnt`).
pub const DOMAIN_OBJECTS: usize = 1024;
/// Threading levels an application may ask for: xfer's objects are
/// thread-safe, which satisfies each.
const THREADING: [u32; 6] = [
    fi::FI_THREAD_UNSPEC,
    fi::FI_THREAD_SAFE,
    fi::FI_THREAD_FID,
    fi::FI_THREAD_DOMAIN,
    fi::FI_THREAD_COMPLETION,
    fi::FI_THREAD_ENDPOINT,
];
/// Domain capabilities (`domain_attr->caps`).
pub const DOMAIN_CAPS: u64 = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
/// Largest message (xfer's rendezvous carries 64-bit lengths; verbs devices
/// cap a single RDMA READ at 2 GiB, so stay below).
pub const MAX_MSG_SIZE: usize = 1 << 30;
/// Immediate data bytes (`fi_senddata`).
pub const CQ_DATA_SIZE: usize = 8;
/// The completion levels a send may ask for. A send completes
/// inject-complete unless it asks for more; `FI_TRANSMIT_COMPLETE` and
/// `FI_DELIVERY_COMPLETE` make it wait for the target's acknowledgement
/// that the message was placed (`xfer::CompletionLevel`).
pub const COMPLETION_LEVELS: u64 = fi::FI_INJECT_COMPLETE | fi::FI_TRANSMIT_COMPLETE | fi::FI_DELIVERY_COMPLETE;
/// Transmit operation flags xfer honours, as defaults
/// (`tx_attr->op_flags`) and on one `fi_sendmsg`/`fi_tsendmsg`.
pub const TX_OP_FLAGS: u64 =
    fi::FI_INJECT | fi::FI_COMPLETION | COMPLETION_LEVELS | fi::FI_REMOTE_CQ_DATA | fi::FI_MORE;
/// Receive operation flags xfer honours.
pub const RX_OP_FLAGS: u64 = fi::FI_COMPLETION | fi::FI_MORE | fi::FI_MULTI_RECV;
/// Tag format offered when the application names none: 64 one-bit fields
/// (libfabric's internal `FI_TAG_GENERIC`), i.e. all 64 tag bits with any
/// ignore mask, which is what xfer's matcher supports.
pub const TAG_GENERIC: u64 = 0xAAAA_AAAA_AAAA_AAAA;
/// Message ordering: sends to one peer arrive in order (one TCP connection,
/// one RC QP per peer).
pub const MSG_ORDER: u64 = fi::FI_ORDER_SAS;
/// Atomic ordering, added to [`MSG_ORDER`] with `FI_ATOMIC` where the
/// target's engine applies atomics (the `cpu` atomic mode): it applies one
/// peer's frames in the order they were posted. Not in the `device` mode,
/// where a compare-and-swap loop (min, max, bitwise, 32-bit elements) may
/// still be retrying when a later atomic reaches the word
/// ([`device_atomics`]).
pub const ATOMIC_ORDER: u64 =
    fi::FI_ORDER_ATOMIC_RAR | fi::FI_ORDER_ATOMIC_RAW | fi::FI_ORDER_ATOMIC_WAR | fi::FI_ORDER_ATOMIC_WAW;

/// Whether provider `provider`'s target can see each RMA peers apply to it:
/// remote counters (`FI_RMA_EVENT`) and counters bound to regions work
/// there. Every provider is the RDM engine, which serves such a target's
/// RMA itself (verbs grants it no device path).
pub fn serves_rma(provider: &str) -> bool {
    matches!(provider, "tcp" | "shm" | "shm+tcp" | "verbs" | "shm+verbs")
}

/// What the application asked for, read once out of its `fi_info`.
#[derive(Debug, Default, Clone)]
pub struct Hints {
    pub caps: u64,
    pub addr_format: u32,
    pub ep_type: u32,
    pub protocol: u32,
    pub max_msg_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub domain_name: Option<String>,
    pub fabric_name: Option<String>,
    pub av_type: u32,
    pub cq_data_size: usize,
    pub control_progress: u32,
    pub data_progress: u32,
    pub tx_caps: u64,
    pub tx_op_flags: u64,
    pub tx_msg_order: u64,
    pub tx_comp_order: u64,
    pub tx_inject_size: usize,
    pub tx_iov_limit: usize,
    pub rx_caps: u64,
    pub rx_op_flags: u64,
    pub rx_msg_order: u64,
    pub rx_comp_order: u64,
    pub rx_iov_limit: usize,
    pub rx_total_buffered_recv: usize,
    pub src_addr: Option<Vec<u8>>,
    pub dest_addr: Option<Vec<u8>>,
    /// What `fi_getinfo`'s `node` and `service` name.
    pub node: Resolved,
    pub mr_mode: i32,
    pub threading: u32,
    pub mr_key_size: usize,
    /// The largest of the domain's object counts asked for (`cq_cnt`,
    /// `ep_cnt`, `tx_ctx_cnt`, `rx_ctx_cnt`).
    pub domain_objects: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    /// `max_ep_stx_ctx` + `max_ep_srx_ctx`: shared contexts asked for.
    pub shared_ctx: usize,
    pub cntr_cnt: usize,
    pub domain_caps: u64,
    /// `domain_attr->auth_key` and `ep_attr->auth_key` (job keys), and why
    /// one could not be read.
    pub domain_auth_key: Option<Vec<u8>>,
    pub ep_auth_key: Option<Vec<u8>>,
    pub auth_key_refused: Option<&'static str>,
    pub max_err_data: usize,
    /// The largest `max_order_{raw,war,waw}_size` asked for.
    pub max_order_size: usize,
    pub rma_iov_limit: usize,
    pub tx_size: usize,
    pub rx_size: usize,
}

/// Limits of the endpoints xfer opens, from the `XFER_*` environment.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub inject_size: usize,
    pub queue_size: usize,
}

impl Limits {
    /// The effective settings.
    pub fn from_env() -> Limits {
        Limits {
            inject_size: EndpointAttr::from_env().inject_size,
            queue_size: CqAttr::from_env().size,
        }
    }
}

/// What one fi_info offers.
#[derive(Debug, Clone)]
pub struct Offer {
    pub provider: String,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub mem_tag_format: u64,
    pub caps: u64,
    pub av_type: u32,
    pub limits: Limits,
    /// The address format of `src_addr`, `dest_addr`, `fi_getname` and
    /// `fi_av_insert`.
    pub format: Format,
    /// The address the endpoint listens on, when one was named.
    pub src: Option<SocketAddr>,
    /// The peer named by `dest_addr` or `node`/`service`.
    pub dest: Option<Address>,
    /// RMA asked for (and its registration mode accepted).
    pub rma: bool,
    /// `FI_MR_LOCAL` in the registration mode returned (RMA only, when
    /// the application listed it).
    pub mr_local: bool,
    /// The old registration mode asked for (`FI_MR_BASIC`, or
    /// `FI_MR_SCALABLE` without RMA), returned as asked.
    pub old_mr_mode: Option<u32>,
    /// The threading level returned: the one asked for, else `FI_THREAD_SAFE`.
    pub threading: u32,
    /// Transmit and receive queue sizes returned: the sizes asked for when
    /// larger than xfer's defaults (xfer's queues grow, decision 15).
    pub tx_size: usize,
    pub rx_size: usize,
    /// The job keys asked for (`auth_key`), returned as asked.
    pub domain_auth_key: Option<Vec<u8>>,
    pub ep_auth_key: Option<Vec<u8>>,
    /// `tx_attr->msg_order` and `rx_attr->msg_order`.
    pub msg_order: u64,
}

/// Takes [`ATOMIC_ORDER`] out of `offer` for a domain whose device does
/// the atomics (the `device` atomic mode, `Domain::atomic_caps`), or the
/// reason it cannot when `h` asks for it.
pub fn device_atomics(h: &Hints, offer: &mut Offer) -> Result<(), &'static str> {
    if (h.tx_msg_order | h.rx_msg_order) & ATOMIC_ORDER != 0 {
        return Err("atomic ordering (FI_ORDER_ATOMIC_*): this domain's device does atomics (XFER_ATOMIC_MODE=device), not in order");
    }
    offer.msg_order &= !ATOMIC_ORDER;
    Ok(())
}

/// Checks `hints` against what xfer's provider `provider` can do (`atomics`:
/// its endpoints apply remote atomics): the offer, or the first reason it
/// cannot honour them.
pub fn select(h: &Hints, provider: &str, atomics: bool, limits: Limits) -> Result<Offer, &'static str> {
    if h.ep_type != fi::FI_EP_UNSPEC && h.ep_type != fi::FI_EP_RDM {
        return Err("only FI_EP_RDM endpoints");
    }
    if h.caps & !CAPS != 0 || (h.tx_caps | h.rx_caps) & !CAPS != 0 {
        return Err(
            "capabilities beyond FI_MSG, FI_TAGGED, FI_RMA, FI_ATOMIC and their secondary caps (no triggered ops, collectives)",
        );
    }
    let Some(format) = Format::of(h.addr_format) else {
        return Err("address formats: xfer names (FI_FORMAT_UNSPEC), FI_SOCKADDR_IN, FI_SOCKADDR_IN6");
    };
    // Socket addresses, node and service name TCP endpoints, and shm+tcp
    // endpoints by their TCP side.
    let tcp = matches!(provider, "tcp" | "shm+tcp");
    let shm = provider == "shm";
    if format != Format::Xfer && !tcp && !(shm && format == Format::Str) {
        return Err("socket address formats are the TCP provider's, address strings TCP's and shm's");
    }
    if h.protocol != fi::FI_PROTO_UNSPEC {
        return Err("no libfabric wire protocol: xfer speaks its own");
    }
    if h.max_msg_size > MAX_MSG_SIZE {
        return Err("max_msg_size above 1 GiB");
    }
    if h.tx_ctx_cnt > 1 || h.rx_ctx_cnt > 1 {
        return Err("scalable or shared contexts");
    }
    if h.domain_name.as_deref().is_some_and(|d| d != provider) {
        return Err("another domain named");
    }
    if h.fabric_name.as_deref().is_some_and(|f| f != FABRIC_NAME) {
        return Err("another fabric named");
    }
    if ![fi::FI_AV_UNSPEC, fi::FI_AV_MAP, fi::FI_AV_TABLE].contains(&h.av_type) {
        return Err("unknown address vector type");
    }
    if h.cq_data_size > CQ_DATA_SIZE {
        return Err("more than 8 bytes of immediate data");
    }
    let manual = [fi::FI_PROGRESS_UNSPEC, fi::FI_PROGRESS_MANUAL];
    if !manual.contains(&h.control_progress) || !manual.contains(&h.data_progress) {
        return Err("progress is manual (the application's CQ reads drive it)");
    }
    if h.tx_op_flags & !TX_OP_FLAGS != 0 || h.rx_op_flags & !RX_OP_FLAGS != 0 {
        return Err("operation flags xfer does not honour");
    }
    if (h.tx_msg_order | h.rx_msg_order) & !(MSG_ORDER | ATOMIC_ORDER) != 0 {
        return Err("message ordering beyond FI_ORDER_SAS and FI_ORDER_ATOMIC_*");
    }
    if (h.tx_comp_order | h.rx_comp_order) != fi::FI_ORDER_NONE {
        return Err("completion ordering (an eager send may complete before an earlier rendezvous one)");
    }
    if h.tx_inject_size > limits.inject_size {
        return Err("inject_size above XFER_INJECT_SIZE");
    }
    if h.tx_iov_limit > IOV_LIMIT || h.rx_iov_limit > IOV_LIMIT {
        return Err("more than 4 buffers per message (iov_limit is 4)");
    }
    if h.rx_total_buffered_recv > 0 {
        return Err("FI_BUFFERED_RECV");
    }
    let src = match (h.node.src, &h.src_addr) {
        (Some(at), _) => Some(at),
        (None, Some(bytes)) => Some(format.listen_addr(bytes).ok_or("src_addr is not a TCP address")?),
        (None, None) => None,
    };
    let dest = match (h.node.dest, &h.dest_addr) {
        _ if h.node.dest_name.is_some() => h.node.dest_name,
        (Some(at), _) => Some(addr::any_listener(at).ok_or("destination address")?),
        (None, Some(bytes)) => Some(
            format
                .decode(bytes)
                .ok_or("dest_addr is not an address of its format")?,
        ),
        (None, None) => None,
    };
    if !tcp && (src.is_some() || h.node.dest.is_some()) {
        return Err(match shm {
            true => "node and service name TCP addresses: an shm endpoint's name is its process id and a nonce, given out of band (fi_getname) or as an fi_xfer_shm:// node",
            false => "node, service and src_addr name TCP addresses (verbs listens where XFER_VERBS_ADDR says)",
        });
    }
    if dest.as_ref().is_some_and(|d| addr::is_shm(d) != shm) {
        return Err("the destination is an endpoint of another xfer provider (shm names reach shm endpoints only)");
    }
    if format == Format::Inet6 && src.is_some_and(|a| a.is_ipv4())
        || format == Format::Inet && src.is_some_and(|a| a.is_ipv6())
    {
        return Err("the source address is not of the address format asked for");
    }
    if !THREADING.contains(&h.threading) {
        return Err("unknown threading level");
    }
    if h.mr_key_size > MR_KEY_SIZE {
        return Err("remote keys are 8 bytes");
    }
    if h.domain_objects > DOMAIN_OBJECTS {
        return Err("more than 1024 CQs, endpoints or contexts per domain");
    }
    if h.max_ep_tx_ctx > 1 || h.max_ep_rx_ctx > 1 || h.shared_ctx > 0 {
        return Err("several or shared contexts per endpoint");
    }
    if h.cntr_cnt > DOMAIN_OBJECTS {
        return Err("more than 1024 counters per domain");
    }
    if h.domain_caps & !DOMAIN_CAPS != 0 {
        return Err("domain capabilities beyond FI_LOCAL_COMM and FI_REMOTE_COMM (no shared AV)");
    }
    if let Some(why) = h.auth_key_refused {
        return Err(why);
    }
    if (h.caps | h.rx_caps) & fi::FI_SOURCE_ERR != 0 && (h.caps | h.rx_caps) & fi::FI_SOURCE == 0 {
        return Err("FI_SOURCE_ERR without FI_SOURCE");
    }
    if h.max_err_data > MAX_ERR_DATA {
        return Err("more error data than an address (fi_cq_readerr's err_data holds FI_SOURCE_ERR's address only)");
    }
    if h.max_order_size > 0 {
        return Err("RMA ordering (max_order_*_size)");
    }
    if h.rma_iov_limit > RMA_IOV_LIMIT {
        return Err("more remote segments per RMA than rma_iov_limit (4)");
    }
    let rma_event = (h.caps | h.rx_caps) & fi::FI_RMA_EVENT != 0;
    if rma_event && !serves_rma(provider) {
        return Err("FI_RMA_EVENT: a verbs target does not see the RDMA peers apply to it (tcp and shm only)");
    }
    let atomic = (h.caps | h.tx_caps | h.rx_caps) & fi::FI_ATOMIC != 0;
    if atomic && !atomics {
        return Err("FI_ATOMIC: this xfer provider's endpoints do not apply remote atomics");
    }
    if !atomic && (h.tx_msg_order | h.rx_msg_order) & ATOMIC_ORDER != 0 {
        return Err("atomic ordering (FI_ORDER_ATOMIC_*) without FI_ATOMIC");
    }
    // FI_READ, FI_WRITE and the remote ones with FI_ATOMIC are atomics'.
    let asked = h.caps | h.tx_caps | h.rx_caps;
    let rma_asked = rma_event || asked & fi::FI_RMA != 0 || (!atomic && asked & RMA_CAPS != 0);
    // Atomics name remote memory as RMA does: the same registration mode.
    let rma = rma_asked || atomic;
    let mr_mode = h.mr_mode as u64;
    let old_form = [fi::FI_MR_BASIC, fi::FI_MR_SCALABLE]
        .into_iter()
        .find(|&m| mr_mode == u64::from(m));
    if rma && old_form == Some(fi::FI_MR_SCALABLE) {
        return Err("FI_MR_SCALABLE: remote addresses are offsets and keys the application's; xfer's are virtual addresses and its own keys");
    }
    if rma && !(mr_mode == 0 || old_form.is_some() || mr_mode & MR_MODE_RMA == MR_MODE_RMA) {
        return Err("RMA needs FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY (or FI_MR_BASIC)");
    }
    let primary = match h.caps & PRIMARY_CAPS {
        0 => PRIMARY_CAPS,
        asked => asked,
    };
    Ok(Offer {
        provider: provider.to_string(),
        // The defaults asked for (FI_COMPLETION for selective completion),
        // and the completion level xfer's sends give when none is asked.
        tx_op_flags: match h.tx_op_flags & COMPLETION_LEVELS {
            0 => h.tx_op_flags | fi::FI_INJECT_COMPLETE,
            _ => h.tx_op_flags,
        },
        rx_op_flags: h.rx_op_flags,
        // Any field layout of up to 64 bits is a set of masks xfer matches.
        mem_tag_format: match h.mem_tag_format {
            0 => TAG_GENERIC,
            asked => asked,
        },
        caps: primary
            | secondary(h.caps, shm)
            | if rma_asked { RMA_CAPS } else { 0 }
            | if atomic { ATOMIC_CAPS } else { 0 }
            | if rma_event { fi::FI_RMA_EVENT } else { 0 },
        av_type: if h.av_type == fi::FI_AV_MAP {
            fi::FI_AV_MAP
        } else {
            fi::FI_AV_TABLE
        },
        limits,
        format,
        src,
        dest,
        rma,
        mr_local: rma && old_form.is_none() && mr_mode & fi::FI_MR_LOCAL != 0,
        old_mr_mode: old_form,
        threading: match h.threading {
            fi::FI_THREAD_UNSPEC => fi::FI_THREAD_SAFE,
            asked => asked,
        },
        tx_size: h.tx_size.max(limits.queue_size),
        rx_size: h.rx_size.max(limits.queue_size),
        domain_auth_key: h.domain_auth_key.clone(),
        ep_auth_key: h.ep_auth_key.clone(),
        msg_order: MSG_ORDER | if atomic { ATOMIC_ORDER } else { 0 },
    })
}

/// The secondary capabilities returned for `asked`: those asked for, both
/// directions when none is named, and [`IMPLIED_CAPS`]; on shm, which
/// reaches this host only, `FI_REMOTE_COMM` only when asked for: Open MPI
/// 4.1's ofi MTL asks for it even when every rank shares the node, and
/// whoever forces shm vouches that every peer is local (a peer elsewhere
/// fails at its first operation).
fn secondary(asked: u64, shm: bool) -> u64 {
    let dirs = match asked & (fi::FI_SEND | fi::FI_RECV) {
        0 => fi::FI_SEND | fi::FI_RECV,
        some => some,
    };
    let implied = match shm {
        true => fi::FI_LOCAL_COMM,
        false => IMPLIED_CAPS,
    };
    (asked & SECONDARY_CAPS) | dirs | implied
}

/// Reads a C string field.
///
/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn string(s: *const c_char) -> Option<String> {
    // SAFETY: the caller's contract.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// Snapshots the application's hints.
///
/// # Safety
/// `info` is a valid `fi_info` whose attribute pointers are null or valid
/// (as `fi_allocinfo` makes them).
pub(crate) unsafe fn read_hints(info: &fi::fi_info) -> Hints {
    let mut h = Hints {
        caps: info.caps,
        addr_format: info.addr_format,
        ..Hints::default()
    };
    if !info.src_addr.is_null() && info.src_addrlen > 0 {
        // SAFETY: the application's src_addr holds src_addrlen bytes.
        let bytes = unsafe { std::slice::from_raw_parts(info.src_addr.cast::<u8>(), info.src_addrlen) };
        h.src_addr = Some(bytes.to_vec());
    }
    if !info.dest_addr.is_null() && info.dest_addrlen > 0 {
        // SAFETY: the application's dest_addr holds dest_addrlen bytes.
        let bytes = unsafe { std::slice::from_raw_parts(info.dest_addr.cast::<u8>(), info.dest_addrlen) };
        h.dest_addr = Some(bytes.to_vec());
    }
    // SAFETY (all derefs below): attribute pointers are null or valid.
    if let Some(ep) = unsafe { info.ep_attr.as_ref() } {
        h.ep_type = ep.type_;
        h.protocol = ep.protocol;
        h.max_msg_size = ep.max_msg_size;
        h.mem_tag_format = ep.mem_tag_format;
        h.tx_ctx_cnt = ep.tx_ctx_cnt;
        h.rx_ctx_cnt = ep.rx_ctx_cnt;
        h.max_order_size = ep
            .max_order_raw_size
            .max(ep.max_order_war_size)
            .max(ep.max_order_waw_size);
        // SAFETY: the application's key holds auth_key_size bytes.
        match unsafe { crate::auth::read(ep.auth_key, ep.auth_key_size) } {
            Ok(k) => h.ep_auth_key = k,
            Err(why) => h.auth_key_refused = Some(why),
        }
    }
    if let Some(d) = unsafe { info.domain_attr.as_ref() } {
        // SAFETY: name is null or a C string.
        h.domain_name = unsafe { string(d.name) };
        h.av_type = d.av_type;
        h.cq_data_size = d.cq_data_size;
        h.control_progress = d.control_progress;
        h.data_progress = d.data_progress;
        h.mr_mode = d.mr_mode;
        h.threading = d.threading;
        h.mr_key_size = d.mr_key_size;
        h.domain_objects = d.cq_cnt.max(d.ep_cnt).max(d.tx_ctx_cnt).max(d.rx_ctx_cnt);
        h.max_ep_tx_ctx = d.max_ep_tx_ctx;
        h.max_ep_rx_ctx = d.max_ep_rx_ctx;
        h.shared_ctx = d.max_ep_stx_ctx.saturating_add(d.max_ep_srx_ctx);
        h.cntr_cnt = d.cntr_cnt;
        h.domain_caps = d.caps;
        // SAFETY: the application's key holds auth_key_size bytes.
        match unsafe { crate::auth::read(d.auth_key, d.auth_key_size) } {
            Ok(k) => h.domain_auth_key = k,
            Err(why) => h.auth_key_refused = Some(why),
        }
        h.max_err_data = d.max_err_data;
    }
    if let Some(f) = unsafe { info.fabric_attr.as_ref() } {
        // SAFETY: name is null or a C string.
        h.fabric_name = unsafe { string(f.name) };
    }
    if let Some(tx) = unsafe { info.tx_attr.as_ref() } {
        h.tx_caps = tx.caps;
        h.tx_op_flags = tx.op_flags;
        h.tx_msg_order = tx.msg_order;
        h.tx_comp_order = tx.comp_order;
        h.tx_inject_size = tx.inject_size;
        h.tx_iov_limit = tx.iov_limit;
        h.rma_iov_limit = tx.rma_iov_limit;
        h.tx_size = tx.size;
    }
    if let Some(rx) = unsafe { info.rx_attr.as_ref() } {
        h.rx_caps = rx.caps;
        h.rx_op_flags = rx.op_flags;
        h.rx_msg_order = rx.msg_order;
        h.rx_comp_order = rx.comp_order;
        h.rx_iov_limit = rx.iov_limit;
        h.rx_total_buffered_recv = rx.total_buffered_recv;
        h.rx_size = rx.size;
    }
    h
}

/// `strdup` into libfabric's allocator (it frees fi_info strings).
fn c_string(s: &str) -> *mut c_char {
    let c = std::ffi::CString::new(s).unwrap_or_default();
    // SAFETY: `c` is a valid C string; strdup copies it.
    unsafe { libc::strdup(c.as_ptr()) }
}

/// A `malloc`'d copy of `bytes` and its length (null and 0 when out of
/// memory): fi_freeinfo frees `src_addr`, `dest_addr` and the `auth_key`s.
fn malloc_copy(bytes: &[u8]) -> (*mut std::ffi::c_void, usize) {
    // SAFETY: a fresh allocation of bytes.len() bytes, or null.
    let p = unsafe { libc::malloc(bytes.len()) }.cast::<u8>();
    if p.is_null() {
        return (std::ptr::null_mut(), 0);
    }
    // SAFETY: `p` holds bytes.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    (p.cast(), bytes.len())
}

/// Allocates an fi_info (through libfabric, which frees it) describing `offer`.
fn build(version: u32, offer: &Offer) -> Option<*mut fi::fi_info> {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with every
    // attribute struct allocated (what fi_allocinfo does).
    let info = unsafe { fi::fi_dupinfo(std::ptr::null()) };
    // SAFETY: non-null results of fi_dupinfo are valid and ours.
    let i = unsafe { info.as_mut() }?;
    let (caps, l) = (offer.caps, offer.limits);
    i.caps = caps;
    i.mode = 0;
    i.addr_format = offer.format.code();
    if let Some(src) = offer.src.and_then(|at| offer.format.source(at)) {
        (i.src_addr, i.src_addrlen) = malloc_copy(&src);
    }
    if let Some(dest) = offer.dest.and_then(|a| offer.format.encode(&a)) {
        (i.dest_addr, i.dest_addrlen) = malloc_copy(&dest);
    }
    // SAFETY (all derefs below): fi_dupinfo allocated every attribute.
    let (tx, rx, ep, dom, fab) = unsafe {
        (
            i.tx_attr.as_mut()?,
            i.rx_attr.as_mut()?,
            i.ep_attr.as_mut()?,
            i.domain_attr.as_mut()?,
            i.fabric_attr.as_mut()?,
        )
    };
    tx.caps = caps & (PRIMARY_CAPS | fi::FI_SEND | fi::FI_RMA | fi::FI_ATOMIC | fi::FI_READ | fi::FI_WRITE);
    tx.msg_order = offer.msg_order;
    tx.comp_order = fi::FI_ORDER_NONE;
    tx.op_flags = offer.tx_op_flags;
    tx.inject_size = l.inject_size;
    tx.size = offer.tx_size;
    tx.iov_limit = IOV_LIMIT;
    tx.rma_iov_limit = if offer.rma { RMA_IOV_LIMIT } else { 0 };
    rx.caps = caps
        & (PRIMARY_CAPS
            | fi::FI_RECV
            | fi::FI_DIRECTED_RECV
            | fi::FI_SOURCE
            | fi::FI_SOURCE_ERR
            | fi::FI_MULTI_RECV
            | fi::FI_RMA
            | fi::FI_ATOMIC
            | fi::FI_REMOTE_READ
            | fi::FI_REMOTE_WRITE
            | fi::FI_RMA_EVENT);
    rx.op_flags = offer.rx_op_flags;
    rx.msg_order = offer.msg_order;
    rx.comp_order = fi::FI_ORDER_NONE;
    rx.size = offer.rx_size;
    rx.iov_limit = IOV_LIMIT;
    ep.type_ = fi::FI_EP_RDM;
    ep.protocol = fi::FI_PROTO_UNSPEC;
    ep.max_msg_size = MAX_MSG_SIZE;
    ep.tx_ctx_cnt = 1;
    ep.rx_ctx_cnt = 1;
    ep.mem_tag_format = offer.mem_tag_format;
    dom.name = c_string(&offer.provider);
    dom.threading = offer.threading;
    dom.control_progress = fi::FI_PROGRESS_MANUAL;
    dom.data_progress = fi::FI_PROGRESS_MANUAL;
    dom.resource_mgmt = fi::FI_RM_ENABLED;
    dom.av_type = offer.av_type;
    let local = if offer.mr_local { fi::FI_MR_LOCAL } else { 0 };
    dom.mr_mode = match (offer.old_mr_mode, offer.rma, version < fi::version(1, 5)) {
        (Some(old), _, _) => old as c_int,
        (None, true, true) => fi::FI_MR_BASIC as c_int,
        (None, true, false) => (MR_MODE_RMA | local) as c_int,
        (None, false, true) => fi::FI_MR_SCALABLE as c_int,
        (None, false, false) => 0,
    };
    dom.mr_key_size = MR_KEY_SIZE;
    dom.cq_data_size = CQ_DATA_SIZE;
    dom.cq_cnt = DOMAIN_OBJECTS;
    dom.ep_cnt = DOMAIN_OBJECTS;
    dom.tx_ctx_cnt = DOMAIN_OBJECTS;
    dom.rx_ctx_cnt = DOMAIN_OBJECTS;
    dom.max_ep_tx_ctx = 1;
    dom.max_ep_rx_ctx = 1;
    dom.mr_iov_limit = 1;
    dom.max_err_data = MAX_ERR_DATA;
    dom.cntr_cnt = DOMAIN_OBJECTS;
    dom.caps = DOMAIN_CAPS & caps;
    if let Some(k) = &offer.domain_auth_key {
        let (p, n) = malloc_copy(k);
        (dom.auth_key, dom.auth_key_size) = (p.cast(), n);
    }
    if let Some(k) = &offer.ep_auth_key {
        let (p, n) = malloc_copy(k);
        (ep.auth_key, ep.auth_key_size) = (p.cast(), n);
    }
    fab.name = c_string(FABRIC_NAME);
    fab.prov_version = crate::PROVIDER_VERSION;
    fab.api_version = version;
    Some(info)
}

/// The IP a server given only a service listens on: `tcp.addr`'s
/// (`FI_XFER_TCP_ADDR`, else `XFER_TCP_ADDR`) when it is set (the interface
/// the user chose for xfer), else none: every interface (`0.0.0.0`), as
/// libfabric's socket providers bind.
fn default_ip() -> Option<IpAddr> {
    let text = xfer_facade::TcpAttr::from_params(&crate::params::from_env())
        .ok()?
        .addr?;
    text.parse::<SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| text.parse::<IpAddr>())
        .ok()
}

/// Whether xfer provider `name` gets an fi_info: every usable one but shm,
/// or only the one `XFER_PROVIDER` (`FI_XFER_PROVIDER`) forces. Open MPI 4.1
/// treats fi_infos of one libfabric provider with alike attributes as NICs
/// of one fabric and spreads its ranks over them by local rank
/// (`opal_mca_common_ofi_select_provider`): with shm+verbs and shm+tcp both
/// listed, ranks would land on providers that cannot reach each other, so
/// `XFER_PROVIDER` must be able to leave one entry. shm reaches this host
/// only, so, as the facade does, it is offered only when chosen: forced, or
/// named by the hints' `domain_attr->name` (`fi_info -d shm`); so is
/// `verbs`, which `shm+verbs` includes (listed beside it, it would split
/// ranks). `tcp` stands in for `shm+tcp` (which includes it) where that
/// took no fi_info (`shm_tcp_offered` false): hints with socket address
/// formats, node and service, or naming `tcp`; listed beside it, it would
/// split ranks as verbs does.
fn offered(forced: Option<&str>, asked: Option<&str>, name: &str, shm_tcp_offered: bool) -> bool {
    match (forced, name) {
        (Some(f), _) => f == name,
        (None, "shm" | "verbs") => asked == Some(name),
        (None, "tcp") => !shm_tcp_offered,
        (None, _) => true,
    }
}

/// The provider's `getinfo`: an fi_info per usable xfer provider (only the
/// one `XFER_PROVIDER` names, when set) that can honour `hints`, in xfer's
/// order of preference; `-FI_ENODATA` when none.
pub(crate) unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi::fi_info,
    info: *mut *mut fi::fi_info,
) -> c_int {
    guard(PANIC, || {
        if info.is_null() {
            return fi::err(libc::EINVAL as u32);
        }
        // SAFETY: libfabric passes null or a valid fi_info.
        let mut h = match unsafe { hints.as_ref() } {
            // SAFETY: a valid fi_info from the application.
            Some(hints) => unsafe { read_hints(hints) },
            None => Hints::default(),
        };
        // SAFETY: libfabric passes null or the application's C strings.
        let (node, service) = unsafe { (string(node), string(service)) };
        let resolved = addr::resolve(
            node.as_deref(),
            service.as_deref(),
            flags & fi::FI_SOURCE != 0,
            default_ip(),
        );
        h.node = match resolved {
            Ok(r) => r,
            Err(why) => {
                tracing::debug!(?node, ?service, why, "fi_getinfo: node/service refused");
                return -(libc::ENODATA);
            }
        };
        let limits = Limits::from_env();
        let asks_atomics = (h.caps | h.tx_caps | h.rx_caps) & fi::FI_ATOMIC != 0;
        let forced = crate::params::provider();
        let (mut head, mut tail): (*mut fi::fi_info, *mut fi::fi_info) = (std::ptr::null_mut(), std::ptr::null_mut());
        let usable = xfer_facade::info_for(&{
            let mut a = DomainAttr::from_env();
            a.params = crate::params::from_env();
            a
        })
        .into_iter()
        .filter(|p| p.available);
        let mut shm_tcp_offered = false;
        for p in usable {
            if !offered(forced.as_deref(), h.domain_name.as_deref(), p.name, shm_tcp_offered) {
                continue;
            }
            let mode = match asks_atomics {
                true => crate::domain::atomic_mode(p.name),
                false => None,
            };
            let offer = select(&h, p.name, mode.is_some(), limits).and_then(|mut o| {
                if mode == Some(AtomicMode::Device) {
                    device_atomics(&h, &mut o)?;
                }
                Ok(o)
            });
            let offer = match offer {
                Ok(o) => o,
                Err(why) => {
                    tracing::debug!(provider = p.name, why, "fi_getinfo: hints refused");
                    continue;
                }
            };
            let Some(new) = build(version, &offer) else {
                // SAFETY: `head` is null or the list this call allocated.
                unsafe { fi::fi_freeinfo(head) };
                return -(libc::ENOMEM);
            };
            match tail.is_null() {
                true => head = new,
                // SAFETY: `tail` is the last fi_info we allocated.
                false => unsafe { (*tail).next = new },
            }
            tail = new;
            shm_tcp_offered |= p.name == xfer_facade::mixed::NAME;
        }
        if head.is_null() {
            return -(libc::ENODATA);
        }
        // SAFETY: checked non-null above.
        unsafe { *info = head };
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        inject_size: 4096,
        queue_size: 4096,
    };

    #[test]
    fn xfer_provider_leaves_one_entry() {
        let offered = |forced, asked, name| offered(forced, asked, name, false);
        assert!(offered(None, None, "shm+verbs") && offered(None, None, "shm+tcp"));
        assert!(!offered(None, None, "verbs"), "shm+verbs includes it");
        assert!(offered(None, Some("verbs"), "verbs") && offered(Some("verbs"), None, "verbs"));
        assert!(offered(Some("tcp"), None, "tcp"));
        assert!(!offered(Some("tcp"), None, "verbs") && !offered(Some("tcp"), None, "shm+tcp"));
        assert!(!offered(None, None, "shm"), "same host only: offered when chosen");
        assert!(offered(Some("shm"), None, "shm") && !offered(Some("shm"), None, "tcp"));
        assert!(offered(None, Some("shm"), "shm"), "named by the hints");
        assert!(!offered(Some("tcp"), Some("shm"), "shm"), "XFER_PROVIDER wins");
        assert!(offered(Some("shm+tcp"), None, "shm+tcp") && offered(None, Some("shm+tcp"), "shm+tcp"));
    }

    #[test]
    fn tcp_stands_in_for_shm_tcp() {
        assert!(!offered(None, None, "tcp", true), "beside shm+tcp it would split ranks");
        assert!(offered(None, None, "tcp", false), "where shm+tcp took no fi_info");
        assert!(offered(None, Some("tcp"), "tcp", false));
        assert!(offered(Some("tcp"), None, "tcp", true), "forced");
    }

    #[test]
    fn pingpong_hints_are_accepted() {
        let h = Hints {
            caps: fi::FI_TAGGED,
            ep_type: fi::FI_EP_RDM,
            ..Hints::default()
        };
        let o = select(&h, "tcp", false, L).unwrap();
        assert_eq!(o.caps & PRIMARY_CAPS, fi::FI_TAGGED, "only the primary caps asked for");
        assert_eq!(o.av_type, fi::FI_AV_TABLE);
        assert!(select(&Hints::default(), "tcp", false, L).unwrap().caps & fi::FI_MSG != 0);
    }

    #[test]
    fn auth_keys_are_taken_and_returned_as_asked() {
        let h = Hints {
            domain_auth_key: Some(b"job".to_vec()),
            ep_auth_key: Some(b"mine".to_vec()),
            ..Hints::default()
        };
        // Every provider checks job keys: the engine's in its handshake.
        for p in ["tcp", "verbs", "shm", "shm+tcp"] {
            let o = select(&h, p, false, L).unwrap();
            assert_eq!(o.domain_auth_key.as_deref(), Some(&b"job"[..]), "{p}");
            assert_eq!(o.ep_auth_key.as_deref(), Some(&b"mine"[..]), "{p}");
        }
        let k = [7u8; crate::auth::MAX_AUTH_KEY + 1];
        // SAFETY: each pointer is null or valid for the length given.
        unsafe {
            assert_eq!(crate::auth::read(std::ptr::null(), 0), Ok(None));
            assert!(crate::auth::read(std::ptr::null(), 4).is_err(), "a size without a key");
            assert!(crate::auth::read(k.as_ptr(), k.len()).is_err(), "too long");
            assert_eq!(crate::auth::read(k.as_ptr(), 3), Ok(Some(vec![7; 3])));
        }
    }

    #[test]
    fn capabilities_are_what_was_asked_for() {
        let caps = |asked: u64| {
            select(
                &Hints {
                    caps: asked,
                    ..Hints::default()
                },
                "tcp",
                false,
                L,
            )
            .unwrap()
            .caps
        };
        let plain = caps(fi::FI_MSG);
        assert_eq!(
            plain & (fi::FI_DIRECTED_RECV | fi::FI_SOURCE | fi::FI_SOURCE_ERR),
            0,
            "not asked: not added"
        );
        let named = fi::FI_MSG | fi::FI_SOURCE | fi::FI_SOURCE_ERR;
        assert_eq!(caps(named) & named, named, "FI_SOURCE_ERR with FI_SOURCE");
        let alone = Hints {
            caps: fi::FI_MSG | fi::FI_SOURCE_ERR,
            ..Hints::default()
        };
        assert!(
            select(&alone, "tcp", false, L).is_err(),
            "FI_SOURCE_ERR needs FI_SOURCE"
        );
        assert_eq!(
            plain & (fi::FI_SEND | fi::FI_RECV),
            fi::FI_SEND | fi::FI_RECV,
            "both directions"
        );
        assert_eq!(
            caps(fi::FI_MSG | fi::FI_SEND) & (fi::FI_SEND | fi::FI_RECV),
            fi::FI_SEND
        );
        let directed = caps(fi::FI_TAGGED | fi::FI_DIRECTED_RECV | fi::FI_SOURCE);
        assert_eq!(
            directed & (fi::FI_DIRECTED_RECV | fi::FI_SOURCE),
            fi::FI_DIRECTED_RECV | fi::FI_SOURCE
        );
    }

    #[test]
    fn node_and_service_give_source_and_destination() {
        let server = Hints {
            node: addr::resolve(None, Some("9228"), true, None).unwrap(),
            ..Hints::default()
        };
        let o = select(&server, "tcp", false, L).unwrap();
        assert_eq!(o.src, Some("0.0.0.0:9228".parse().unwrap()));
        assert!(
            select(&server, "verbs", false, L).is_err(),
            "verbs has no service to listen on"
        );
        let client = Hints {
            node: addr::resolve(Some("127.0.0.1"), Some("9228"), false, None).unwrap(),
            ..Hints::default()
        };
        let o = select(&client, "tcp", false, L).unwrap();
        assert_eq!(o.dest, addr::any_listener("127.0.0.1:9228".parse().unwrap()));
        let sin = Hints {
            addr_format: fi::FI_SOCKADDR_IN,
            src_addr: Some(addr::to_sockaddr("127.0.0.1:7".parse().unwrap())),
            ..Hints::default()
        };
        assert_eq!(
            select(&sin, "tcp", false, L).unwrap().src,
            Some("127.0.0.1:7".parse().unwrap())
        );
        let six = Hints {
            addr_format: fi::FI_SOCKADDR_IN6,
            ..sin
        };
        assert!(
            select(&six, "tcp", false, L).is_err(),
            "an IPv4 source in an IPv6 format"
        );
    }

    #[test]
    fn what_xfer_cannot_do_is_refused() {
        let refuse = |h: Hints| select(&h, "tcp", false, L).unwrap_err();
        refuse(Hints {
            ep_type: fi::FI_EP_MSG,
            ..Hints::default()
        });
        refuse(Hints {
            caps: fi::FI_ATOMIC,
            ..Hints::default()
        });
        // Atomics where the domain applies them: their caps and RMA's
        // registration mode, without FI_RMA unasked.
        let atomic = Hints {
            caps: fi::FI_ATOMIC | fi::FI_READ | fi::FI_WRITE,
            ..Hints::default()
        };
        let o = select(&atomic, "shm", true, L).unwrap();
        assert_eq!(o.caps & (ATOMIC_CAPS | fi::FI_RMA), ATOMIC_CAPS);
        assert!(o.rma, "the registration mode remote access needs");
        let both = Hints {
            caps: fi::FI_ATOMIC | fi::FI_RMA,
            ..Hints::default()
        };
        assert_eq!(select(&both, "shm", true, L).unwrap().caps & RMA_CAPS, RMA_CAPS);
        assert!(select(&atomic, "tcp", false, L).is_err());
        // Atomic ordering with atomics the target's engine applies; none
        // where the device does them, and refused when asked for there.
        assert_eq!(o.msg_order, MSG_ORDER | ATOMIC_ORDER);
        let mut dev = o.clone();
        device_atomics(&atomic, &mut dev).unwrap();
        assert_eq!(dev.msg_order, MSG_ORDER);
        let ordered = Hints {
            tx_msg_order: fi::FI_ORDER_SAS | fi::FI_ORDER_ATOMIC_RAW,
            ..atomic.clone()
        };
        let mut o = select(&ordered, "verbs", true, L).unwrap();
        assert_eq!(o.msg_order & ATOMIC_ORDER, ATOMIC_ORDER);
        assert!(device_atomics(&ordered, &mut o).is_err());
        assert!(
            select(
                &Hints {
                    caps: fi::FI_MSG,
                    ..ordered
                },
                "tcp",
                false,
                L
            )
            .is_err(),
            "without FI_ATOMIC"
        );
        assert_eq!(select(&Hints::default(), "tcp", false, L).unwrap().msg_order, MSG_ORDER);
        refuse(Hints {
            caps: fi::FI_RMA,
            mr_mode: fi::FI_MR_LOCAL as i32,
            ..Hints::default()
        });
        let rma = |mr_mode: u64| Hints {
            caps: fi::FI_RMA | fi::FI_TAGGED,
            mr_mode: mr_mode as i32,
            ..Hints::default()
        };
        assert!(select(&rma(MR_MODE_RMA | fi::FI_MR_LOCAL), "tcp", false, L).is_ok_and(|o| o.rma));
        assert!(select(&rma(0), "tcp", false, L).is_ok_and(|o| o.rma && o.caps & RMA_CAPS == RMA_CAPS));
        assert!(
            select(&rma(0), "tcp", false, L).is_ok_and(|o| o.caps & fi::FI_RMA_EVENT == 0),
            "FI_RMA_EVENT only when asked"
        );
        // Remote counters: where the target serves RMA itself.
        let events = Hints {
            caps: fi::FI_RMA | fi::FI_RMA_EVENT,
            ..Hints::default()
        };
        assert!(select(&events, "tcp", false, L).is_ok_and(|o| o.rma && o.caps & fi::FI_RMA_EVENT != 0));
        assert!(
            select(&events, "verbs", false, L).is_ok_and(|o| o.caps & fi::FI_RMA_EVENT != 0),
            "a verbs target with remote counters serves RMA itself"
        );
        refuse(Hints {
            caps: fi::FI_MSG | fi::FI_TRIGGER,
            ..Hints::default()
        });
        refuse(Hints {
            addr_format: fi::FI_SOCKADDR,
            ..Hints::default()
        });
        refuse(Hints {
            domain_name: Some("verbs".into()),
            ..Hints::default()
        });
        refuse(Hints {
            data_progress: fi::FI_PROGRESS_AUTO,
            ..Hints::default()
        });
        // Every completion level is honoured, and offered as asked.
        for level in [fi::FI_TRANSMIT_COMPLETE, fi::FI_DELIVERY_COMPLETE] {
            let offer = select(
                &Hints {
                    tx_op_flags: level | fi::FI_COMPLETION,
                    ..Hints::default()
                },
                "tcp",
                false,
                L,
            )
            .expect("a completion level is honoured");
            assert_eq!(offer.tx_op_flags, level | fi::FI_COMPLETION);
        }
        assert_eq!(
            select(&Hints::default(), "tcp", false, L).map(|o| o.tx_op_flags),
            Ok(fi::FI_INJECT_COMPLETE)
        );
        refuse(Hints {
            tx_op_flags: fi::FI_MATCH_COMPLETE,
            ..Hints::default()
        });
        refuse(Hints {
            tx_inject_size: 1 << 20,
            ..Hints::default()
        });
        refuse(Hints {
            tx_iov_limit: 5,
            ..Hints::default()
        });
        assert!(select(
            &Hints {
                rx_iov_limit: 4,
                ..Hints::default()
            },
            "tcp",
            false,
            L
        )
        .is_ok());
        refuse(Hints {
            cq_data_size: 16,
            ..Hints::default()
        });
        refuse(Hints {
            dest_addr: Some(vec![0; 3]),
            ..Hints::default()
        });
        assert!(select(
            &Hints {
                domain_name: Some("tcp".into()),
                ..Hints::default()
            },
            "tcp",
            false,
            L
        )
        .is_ok());
    }

    /// shm: address strings and raw names, remote counters (its engine
    /// serves RMA itself); no services, socket addresses or names of
    /// other providers.
    #[test]
    fn shm_offers_strings_and_rma_events_and_no_services() {
        let o = select(
            &Hints {
                caps: fi::FI_RMA | fi::FI_RMA_EVENT | fi::FI_TAGGED,
                addr_format: fi::FI_ADDR_STR,
                ..Hints::default()
            },
            "shm",
            false,
            L,
        )
        .unwrap();
        assert!(o.rma && o.caps & fi::FI_RMA_EVENT != 0 && o.format == Format::Str);
        assert_eq!(o.caps & IMPLIED_CAPS, fi::FI_LOCAL_COMM, "this host only, unless asked");
        let remote = Hints {
            caps: fi::FI_TAGGED | IMPLIED_CAPS,
            ..Hints::default()
        };
        assert_eq!(
            select(&remote, "shm", false, L).unwrap().caps & IMPLIED_CAPS,
            IMPLIED_CAPS
        );
        let refuse = |h: Hints| select(&h, "shm", false, L).unwrap_err();
        refuse(Hints {
            addr_format: fi::FI_SOCKADDR_IN,
            ..Hints::default()
        });
        for source in [true, false] {
            let why = refuse(Hints {
                node: addr::resolve(None, Some("9228"), source, None).unwrap(),
                ..Hints::default()
            });
            assert!(why.contains("out of band"), "{why}");
        }
        let tcp = addr::any_listener("127.0.0.1:9228".parse().unwrap()).unwrap();
        refuse(Hints {
            dest_addr: Some(crate::name::encode(&tcp).unwrap().to_vec()),
            ..Hints::default()
        });
        let mut raw = vec![xfer_shm::PROVIDER_ID, b'x', b's'];
        raw.extend_from_slice(&[1; 12]);
        let peer = Address::new(&raw).unwrap();
        let node = addr::xfer_string(&peer);
        let h = Hints {
            addr_format: fi::FI_ADDR_STR,
            node: addr::resolve(Some(&node), None, false, None).unwrap(),
            ..Hints::default()
        };
        assert_eq!(select(&h, "shm", false, L).unwrap().dest, Some(peer));
        assert!(select(&h, "tcp", false, L).is_err(), "an shm name on tcp");
    }

    #[test]
    fn domain_and_size_hints_are_honoured_or_refused() {
        let refuse = |h: Hints| select(&h, "tcp", false, L).unwrap_err();
        for h in [
            Hints {
                threading: 99,
                ..Hints::default()
            },
            Hints {
                mr_key_size: 16,
                ..Hints::default()
            },
            Hints {
                domain_objects: 4096,
                ..Hints::default()
            },
            Hints {
                max_ep_tx_ctx: 2,
                ..Hints::default()
            },
            Hints {
                shared_ctx: 1,
                ..Hints::default()
            },
            Hints {
                cntr_cnt: 4096,
                ..Hints::default()
            },
            Hints {
                domain_caps: fi::FI_SHARED_AV,
                ..Hints::default()
            },
            Hints {
                auth_key_refused: Some("an auth_key longer than 1024 bytes"),
                ..Hints::default()
            },
            Hints {
                max_err_data: MAX_ERR_DATA + 1,
                ..Hints::default()
            },
            Hints {
                max_order_size: 8,
                ..Hints::default()
            },
            Hints {
                caps: fi::FI_RMA,
                rma_iov_limit: RMA_IOV_LIMIT + 1,
                ..Hints::default()
            },
        ] {
            refuse(h);
        }
        let o = select(
            &Hints {
                threading: fi::FI_THREAD_DOMAIN,
                mr_key_size: 8,
                domain_objects: 16,
                tx_size: 1 << 20,
                rx_size: 1,
                ..Hints::default()
            },
            "tcp",
            false,
            L,
        )
        .unwrap();
        assert_eq!(o.threading, fi::FI_THREAD_DOMAIN, "the level asked for");
        assert_eq!(
            (o.tx_size, o.rx_size),
            (1 << 20, L.queue_size),
            "the larger of asked and default"
        );
        assert_eq!(
            select(&Hints::default(), "tcp", false, L).unwrap().threading,
            fi::FI_THREAD_SAFE
        );
    }

    #[test]
    fn old_registration_modes_are_honoured() {
        let h = |caps: u64, mr_mode: u32| Hints {
            caps,
            mr_mode: mr_mode as i32,
            ..Hints::default()
        };
        let o = select(&h(fi::FI_RMA, fi::FI_MR_BASIC), "tcp", false, L).unwrap();
        assert_eq!((o.rma, o.old_mr_mode, o.mr_local), (true, Some(fi::FI_MR_BASIC), false));
        let o = select(&h(fi::FI_MSG, fi::FI_MR_SCALABLE), "tcp", false, L).unwrap();
        assert_eq!(o.old_mr_mode, Some(fi::FI_MR_SCALABLE));
        assert!(select(&h(fi::FI_RMA, fi::FI_MR_SCALABLE), "tcp", false, L).is_err());
        assert_eq!(select(&h(fi::FI_RMA, 0), "tcp", false, L).unwrap().old_mr_mode, None);
    }

    #[test]
    fn mr_local_only_with_rma_and_when_listed() {
        let local = fi::FI_MR_LOCAL;
        let h = |caps: u64, mr_mode: u64| Hints {
            caps,
            mr_mode: mr_mode as i32,
            ..Hints::default()
        };
        assert!(
            select(&h(fi::FI_RMA, MR_MODE_RMA | local), "tcp", false, L)
                .unwrap()
                .mr_local
        );
        assert!(!select(&h(fi::FI_RMA, MR_MODE_RMA), "tcp", false, L).unwrap().mr_local);
        assert!(
            !select(&h(fi::FI_TAGGED, MR_MODE_RMA | local), "tcp", false, L)
                .unwrap()
                .mr_local
        );
    }
}
