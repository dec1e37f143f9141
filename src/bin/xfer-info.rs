//! `xfer-info`: what xfer sees on this machine, like libfabric's `fi_info`.
//!
//! Lists the providers compiled in (in order of preference, whether each can
//! run here and why), the one `xfer::open_default()` picks and why not each
//! other one (`xfer::open_report`), the name of an
//! endpoint opened on it, every network interface with its state, kind and
//! addresses and whether the TCP provider listens on it (and why not), every
//! verbs device with its limits, ports and GIDs (or why there are none), and
//! every `XFER_*` setting with its effective value and default.
//!
//! ```text
//! cargo run --bin xfer-info              # human-readable
//! cargo run --bin xfer-info -- --json    # one JSON object, for scripts
//! XFER_TCP_ADDR=127.0.0.1 xfer-info      # see the effect of a setting
//! XFER_TCP_IFACE=eth1 xfer-info          # which interface TCP would listen on, and why
//! xfer-info --peer 05…                   # which transport shm+tcp (or shm+verbs) serves that peer over, and why
//! ```
//!
//! `--peer` prints one line for an `shm+tcp` or `shm+verbs` endpoint name
//! (hex, as `Address` prints): `shm: same host, same user and namespaces`,
//! or `tcp:` (`verbs:`) and the reason (a different host identity, no shared-memory address
//! offered, `shm.enabled=0` here).
//!
//! Exit status: 0 when an endpoint could be opened, 1 when not (the report
//! still lists providers and settings, with the error), 2 on bad arguments.

use std::io::Write;
use std::process::ExitCode;

use xfer::{CqAttr, DomainAttr, EndpointAttr, ProviderChoice, ProviderInfo, Setting};

const USAGE: &str = "usage: xfer-info [--json] | xfer-info --peer NAME-HEX";

#[path = "xfer-info/tcp.rs"]
mod tcp;

/// `--peer NAME`: the transport an endpoint of the peer's pair provider
/// here would serve that peer over, and why.
fn peer_route(name: Option<String>) -> ExitCode {
    let Some(name) = name else {
        eprintln!("xfer-info: --peer needs an endpoint name in hex\n{USAGE}");
        return ExitCode::from(2);
    };
    match name
        .parse::<xfer::Address>()
        .and_then(|a| xfer::mixed::explain_route(&a))
    {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xfer-info: --peer {name}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Everything the report shows.
struct Report {
    providers: Vec<ProviderInfo>,
    opened: Opened,
    /// The network interfaces and the TCP provider's choice among them.
    tcp: tcp::Section,
    /// The verbs devices, when the verbs provider is compiled in.
    verbs: Option<verbs::Probe>,
    rows: Vec<Row>,
}

/// One row of the settings table.
struct Row {
    setting: Setting,
    default: String,
}

/// What `open_default` gave: the provider it picked, if any, why not each
/// other one, and the name of an endpoint opened on it, or why that failed.
struct Opened {
    provider: Option<&'static str>,
    choice: ProviderChoice,
    endpoint: Result<Name, String>,
}

/// An endpoint's name.
struct Name {
    hex: String,
    /// A provider-specific readable form, when there is one.
    text: Option<String>,
}

fn main() -> ExitCode {
    #[cfg(feature = "logging")]
    xfer::init_logging();
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--peer" => return peer_route(args.next()),
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("xfer-info: unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }

    let report = Report {
        providers: xfer::info(),
        opened: open(),
        tcp: tcp::section(),
        verbs: verbs::probe(),
        rows: settings(),
    };
    let mut out = std::io::stdout().lock();
    let written = if json {
        writeln!(out, "{}", to_json(&report))
    } else {
        print_text(&mut out, &report)
    };
    // A reader that stops early (`xfer-info | head`) is not an error.
    if let Err(e) = written.and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("xfer-info: writing the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    match report.opened.endpoint {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xfer-info: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens a domain, completion queue, address vector and endpoint the way an
/// application would, with attributes from the environment.
fn open() -> Opened {
    let (domain, choice) = xfer::open_report(&DomainAttr::from_env());
    let domain = match domain {
        Ok(d) => d,
        Err(e) => {
            return Opened {
                provider: None,
                choice,
                endpoint: Err(format!("opening a domain: {e}")),
            }
        }
    };
    Opened {
        provider: Some(domain.provider()),
        choice,
        endpoint: endpoint_name(&domain),
    }
}

fn endpoint_name(domain: &xfer::Domain) -> Result<Name, String> {
    let cq = domain
        .cq(&CqAttr::from_env())
        .map_err(|e| format!("opening a completion queue: {e}"))?;
    let av = domain.av().map_err(|e| format!("opening an address vector: {e}"))?;
    let ep = domain
        .endpoint(&cq, &av, &EndpointAttr::from_env())
        .map_err(|e| format!("opening an endpoint: {e}"))?;
    let bytes = ep.name().as_bytes().to_vec();
    let text = match domain.provider() {
        "tcp" => xfer_tcp::name::TcpName::decode(&bytes).ok().map(|n| n.to_string()),
        #[cfg(feature = "verbs")]
        "verbs" => bytes
            .get(1..)
            .and_then(xfer_verbs::transport::decode)
            .map(|n| format!("verbs://{}#{:016x}", n.addr, n.nonce)),
        #[cfg(feature = "verbs")]
        "shm+verbs" => bytes
            .get(1..)
            .and_then(xfer_core::unstable::rdm::pair::Parts::parse)
            .and_then(|p| xfer_verbs::transport::decode(p.second))
            .map(|n| format!("shm+verbs://{}#{:016x}", n.addr, n.nonce)),
        _ => None,
    };
    Ok(Name {
        hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        text,
    })
}

/// Every setting, core's and every built-in transport's (with its key),
/// effective (defaults overridden by the environment) next to its default.
fn settings() -> Vec<Row> {
    let effective = [
        DomainAttr::from_env().settings(),
        CqAttr::from_env().settings(),
        EndpointAttr::from_env().settings(),
        xfer::transport_settings(&xfer::Params::new()),
    ];
    let defaults: Vec<Setting> = [
        DomainAttr::default().settings(),
        CqAttr::default().settings(),
        EndpointAttr::default().settings(),
        xfer::default_transport_settings(),
    ]
    .concat();
    effective
        .concat()
        .into_iter()
        .map(|setting| {
            let default = defaults
                .iter()
                .find(|d| d.env == setting.env)
                .map_or_else(|| "?".to_string(), |d| d.value.clone());
            Row { setting, default }
        })
        .collect()
}

fn print_text(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    let Report {
        providers,
        opened,
        tcp,
        verbs,
        rows,
    } = report;
    writeln!(out, "providers (in order of preference):")?;
    let width = providers.iter().map(|p| p.name.len()).max().unwrap_or(0);
    for p in providers {
        let state = if p.available { "available" } else { "unavailable" };
        writeln!(out, "  {:width$}  {state:11}  {}", p.name, p.detail)?;
    }
    writeln!(out)?;
    let forced = if DomainAttr::from_env().provider.is_some() {
        " (forced by XFER_PROVIDER)"
    } else {
        ""
    };
    match opened.provider {
        Some(p) => writeln!(out, "open_default() picks: {p}{forced}")?,
        None => writeln!(out, "open_default() picks: nothing")?,
    }
    writeln!(out, "why:")?;
    for line in opened.choice.to_string().lines() {
        writeln!(out, "  {line}")?;
    }
    match &opened.endpoint {
        Ok(name) => {
            writeln!(out, "endpoint name:        {}", name.hex)?;
            if let Some(text) = &name.text {
                writeln!(out, "                      {text}")?;
            }
        }
        Err(e) => writeln!(out, "error:                {e}")?,
    }
    writeln!(out)?;
    tcp::print_text(out, tcp)?;
    writeln!(out)?;
    if let Some(probe) = verbs {
        verbs::print_text(out, probe)?;
        writeln!(out)?;
    }

    writeln!(
        out,
        "settings (XFER_* environment variables; a transport's also by key, DomainAttr/EndpointAttr params, xfer_domain_attr_set):"
    )?;
    let header = ["VARIABLE", "VALUE", "DEFAULT", "KEY", "DESCRIPTION"];
    let table: Vec<[&str; 5]> = rows
        .iter()
        .map(|r| {
            let key = r.setting.key.unwrap_or("-");
            [r.setting.env, &r.setting.value, &r.default, key, r.setting.doc]
        })
        .collect();
    let mut w = [0; 4];
    for cells in std::iter::once(&header).chain(&table) {
        for (wi, cell) in w.iter_mut().zip(cells) {
            *wi = (*wi).max(cell.len());
        }
    }
    let [w0, w1, w2, w3] = w;
    for [env, value, default, key, doc] in std::iter::once(header).chain(table) {
        writeln!(out, "  {env:w0$}  {value:w1$}  {default:w2$}  {key:w3$}  {doc}")?;
    }
    Ok(())
}

fn to_json(report: &Report) -> String {
    let Report {
        providers,
        opened,
        tcp,
        verbs,
        rows,
    } = report;
    let providers: Vec<String> = providers
        .iter()
        .map(|p| {
            format!(
                r#"{{"name": {}, "available": {}, "detail": {}}}"#,
                quote(p.name),
                p.available,
                quote(&p.detail)
            )
        })
        .collect();
    let chosen = opened.provider.map_or_else(|| "null".to_string(), quote);
    let why: Vec<String> = opened
        .choice
        .candidates
        .iter()
        .map(|c| {
            format!(
                r#"{{"name": {}, "verdict": {}}}"#,
                quote(c.name),
                quote(&c.verdict.to_string())
            )
        })
        .collect();
    let (endpoint, error) = match &opened.endpoint {
        Ok(name) => {
            let text = name.text.as_deref().map_or_else(|| "null".to_string(), quote);
            let endpoint = format!(r#"{{"name_hex": {}, "name": {text}}}"#, quote(&name.hex));
            (endpoint, "null".to_string())
        }
        Err(e) => ("null".to_string(), quote(e)),
    };
    let settings: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                r#"{{"env": {}, "key": {}, "value": {}, "default": {}, "description": {}}}"#,
                quote(r.setting.env),
                r.setting.key.map_or_else(|| "null".to_string(), quote),
                quote(&r.setting.value),
                quote(&r.default),
                quote(r.setting.doc)
            )
        })
        .collect();
    let verbs = verbs.as_ref().map_or_else(|| "null".to_string(), verbs::to_json);
    let tcp = tcp::to_json(tcp);
    format!(
        "{{\n  \"providers\": [\n    {}\n  ],\n  \"chosen\": {chosen},\n  \"why\": [{}],\n  \"endpoint\": {endpoint},\n  \
         \"error\": {error},\n  \"tcp\": {tcp},\n  \"verbs\": {verbs},\n  \"settings\": [\n    {}\n  ]\n}}",
        providers.join(",\n    "),
        why.join(", "),
        settings.join(",\n    ")
    )
}

/// A JSON string literal.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The verbs section: devices, ports and GIDs, and the `XFER_VERBS_*` settings.
#[cfg(feature = "verbs")]
mod verbs {
    use std::io::Write;

    pub use xfer_verbs::Probe;

    use super::quote;

    /// Every device, or why there is none.
    pub fn probe() -> Option<Probe> {
        Some(xfer_verbs::probe())
    }

    /// `ibv_port_state` as `ibv_devinfo` names it.
    fn port_state(state: u32) -> &'static str {
        match state {
            0 => "NOP",
            1 => "DOWN",
            2 => "INIT",
            3 => "ARMED",
            4 => "ACTIVE",
            5 => "ACTIVE_DEFER",
            _ => "unknown",
        }
    }

    /// A GID in the usual eight-group form, without its type.
    fn gid_text(gid: &[u8; 16]) -> String {
        let groups: Vec<String> = gid.chunks(2).map(|p| format!("{:02x}{:02x}", p[0], p[1])).collect();
        groups.join(":")
    }

    pub fn print_text(out: &mut impl Write, probe: &Probe) -> std::io::Result<()> {
        if probe.devices.is_empty() {
            let why = probe.reason.as_deref().unwrap_or("no verbs devices");
            if !probe.loaded {
                return writeln!(out, "verbs devices: none (no rdma-core: {why})");
            }
            return writeln!(out, "verbs devices: none ({why})");
        }
        writeln!(out, "verbs devices:")?;
        for d in &probe.devices {
            let a = &d.attr;
            writeln!(out, "  {}", d.name)?;
            writeln!(
                out,
                "    max_inline {}  max_qp {}  max_qp_wr {}  max_cqe {}  max_qp_rd_atom {}  atomic_cap {}",
                d.max_inline,
                a.max_qp,
                a.max_qp_wr,
                a.max_cqe,
                a.max_qp_rd_atom,
                a.atomic_cap_name()
            )?;
            writeln!(
                out,
                "    max_srq {}  max_srq_wr {}  max_sge {}  max_mr_size {}",
                a.max_srq, a.max_srq_wr, a.max_sge, a.max_mr_size
            )?;
            for p in &d.ports {
                let pa = &p.attr;
                writeln!(
                    out,
                    "    port {}: {}  link layer {}  active MTU {} (max {})  max_msg_sz {}  lid {}",
                    pa.port,
                    port_state(pa.state),
                    pa.link_layer,
                    pa.active_mtu,
                    pa.max_mtu,
                    pa.max_msg_sz,
                    pa.lid
                )?;
                if p.gids.is_empty() {
                    writeln!(out, "      no GIDs")?;
                }
                for g in &p.gids {
                    match g.ipv4() {
                        Some(ip) => writeln!(out, "      gid {:3}  {g}  IPv4 {ip}", g.index)?,
                        None => writeln!(out, "      gid {:3}  {g}", g.index)?,
                    }
                }
            }
        }
        if let Some(why) = &probe.reason {
            writeln!(out, "  (not listed: {why})")?;
        }
        Ok(())
    }

    pub fn to_json(probe: &Probe) -> String {
        let devices: Vec<String> = probe
            .devices
            .iter()
            .map(|d| {
                let a = &d.attr;
                let ports: Vec<String> = d
                    .ports
                    .iter()
                    .map(|p| {
                        let pa = &p.attr;
                        let gids: Vec<String> = p
                            .gids
                            .iter()
                            .map(|g| {
                                format!(
                                    r#"{{"index": {}, "gid": {}, "type": {}, "ipv4": {}}}"#,
                                    g.index,
                                    quote(&gid_text(&g.gid)),
                                    quote(&g.kind),
                                    g.ipv4().map_or_else(|| "null".to_string(), |ip| quote(&ip.to_string()))
                                )
                            })
                            .collect();
                        format!(
                            concat!(
                                r#"{{"port": {}, "state": {}, "active": {}, "link_layer": {}, "active_mtu": {}, "#,
                                r#""max_mtu": {}, "max_msg_sz": {}, "lid": {}, "gids": [{}]}}"#
                            ),
                            pa.port,
                            quote(port_state(pa.state)),
                            pa.active,
                            quote(pa.link_layer),
                            pa.active_mtu,
                            pa.max_mtu,
                            pa.max_msg_sz,
                            pa.lid,
                            gids.join(", ")
                        )
                    })
                    .collect();
                format!(
                    concat!(
                        r#"{{"name": {}, "max_inline": {}, "max_qp": {}, "max_qp_wr": {}, "max_cqe": {}, "#,
                        r#""max_qp_rd_atom": {}, "atomic_cap": {}, "max_srq": {}, "max_srq_wr": {}, "max_sge": {}, "#,
                        r#""max_mr_size": {}, "ports": [{}]}}"#
                    ),
                    quote(&d.name),
                    d.max_inline,
                    a.max_qp,
                    a.max_qp_wr,
                    a.max_cqe,
                    a.max_qp_rd_atom,
                    quote(a.atomic_cap_name()),
                    a.max_srq,
                    a.max_srq_wr,
                    a.max_sge,
                    a.max_mr_size,
                    ports.join(", ")
                )
            })
            .collect();
        let reason = probe.reason.as_deref().map_or_else(|| "null".to_string(), quote);
        format!(
            "{{\"devices\": [{}], \"reason\": {reason}, \"rdma_core\": {}}}",
            devices.join(", "),
            probe.loaded
        )
    }
}

/// Without the verbs provider: no devices section, no settings.
#[cfg(not(feature = "verbs"))]
mod verbs {
    use std::io::Write;

    /// Nothing to probe.
    pub enum Probe {}

    pub fn probe() -> Option<Probe> {
        None
    }

    pub fn print_text(_: &mut impl Write, probe: &Probe) -> std::io::Result<()> {
        match *probe {}
    }

    pub fn to_json(probe: &Probe) -> String {
        match *probe {}
    }
}

#[cfg(all(test, feature = "verbs"))]
mod tests {
    use xfer_verbs::device::PortInfo;
    use xfer_verbs::{DeviceAttr, DeviceInfo, GidEntry, PortAttr, Probe};

    fn probe() -> Probe {
        let mut v2 = [0u8; 16];
        v2[10..12].fill(0xff);
        v2[12..].copy_from_slice(&[10, 0, 2, 15]);
        let mut v1 = [0u8; 16];
        v1[..2].copy_from_slice(&[0xfe, 0x80]);
        Probe {
            loaded: true,
            devices: vec![DeviceInfo {
                name: "rxe0".into(),
                attr: DeviceAttr {
                    phys_port_cnt: 1,
                    max_qp: 1000,
                    max_qp_wr: 2000,
                    max_sge: 32,
                    max_cq: 3000,
                    max_cqe: 4000,
                    max_mr_size: 1 << 40,
                    max_srq: 5000,
                    max_srq_wr: 6000,
                    max_srq_sge: 27,
                    max_qp_rd_atom: 128,
                    max_qp_init_rd_atom: 128,
                    atomic_cap: 1,
                },
                max_inline: 240,
                ports: vec![PortInfo {
                    attr: PortAttr {
                        port: 1,
                        active: true,
                        state: 4,
                        link_layer: "Ethernet",
                        active_mtu: 1024,
                        max_mtu: 4096,
                        gid_tbl_len: 16,
                        lid: 0,
                        max_msg_sz: 1 << 31,
                    },
                    gids: vec![
                        GidEntry {
                            index: 0,
                            gid: v1,
                            kind: "IB/RoCE v1".into(),
                        },
                        GidEntry {
                            index: 1,
                            gid: v2,
                            kind: "RoCE v2".into(),
                        },
                    ],
                }],
            }],
            reason: Some("mlx5_0: cannot open".into()),
        }
    }

    #[test]
    fn devices_ports_and_gids_as_text() {
        let mut out = Vec::new();
        super::verbs::print_text(&mut out, &probe()).unwrap();
        let text = String::from_utf8(out).unwrap();
        for want in [
            "verbs devices:\n  rxe0\n",
            "max_inline 240",
            "max_qp_wr 2000",
            "max_cqe 4000",
            "max_qp_rd_atom 128  atomic_cap hca",
            "max_srq 5000  max_srq_wr 6000",
            "port 1: ACTIVE  link layer Ethernet  active MTU 1024 (max 4096)  max_msg_sz 2147483648",
            "gid   0  fe80:0000:0000:0000:0000:0000:0000:0000 (IB/RoCE v1)\n",
            "gid   1  0000:0000:0000:0000:0000:ffff:0a00:020f (RoCE v2)  IPv4 10.0.2.15\n",
            "(not listed: mlx5_0: cannot open)",
        ] {
            assert!(text.contains(want), "no {want:?} in:\n{text}");
        }

        let mut out = Vec::new();
        let no_devices = Probe {
            loaded: true,
            ..Probe::default()
        };
        super::verbs::print_text(&mut out, &no_devices).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "verbs devices: none (no verbs devices)\n"
        );

        let mut out = Vec::new();
        let no_rdma_core = Probe {
            reason: Some("libibverbs.so.1: cannot open shared object file".into()),
            ..Probe::default()
        };
        super::verbs::print_text(&mut out, &no_rdma_core).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "verbs devices: none (no rdma-core: libibverbs.so.1: cannot open shared object file)\n"
        );
    }

    #[test]
    fn devices_ports_and_gids_as_json() {
        let json = super::verbs::to_json(&probe());
        for want in [
            r#"{"devices": [{"name": "rxe0", "max_inline": 240, "#,
            r#""max_qp_wr": 2000, "max_cqe": 4000, "max_qp_rd_atom": 128, "atomic_cap": "hca", "max_srq": 5000, "#,
            r#""ports": [{"port": 1, "state": "ACTIVE", "active": true, "link_layer": "Ethernet", "active_mtu": 1024, "#,
            r#""max_msg_sz": 2147483648, "#,
            r#"{"index": 0, "gid": "fe80:0000:0000:0000:0000:0000:0000:0000", "type": "IB/RoCE v1", "ipv4": null}"#,
            r#"{"index": 1, "gid": "0000:0000:0000:0000:0000:ffff:0a00:020f", "type": "RoCE v2", "ipv4": "10.0.2.15"}"#,
            r#"]}]}], "reason": "mlx5_0: cannot open", "rdma_core": true}"#,
        ] {
            assert!(json.contains(want), "no {want:?} in:\n{json}");
        }
        let depth = json.chars().try_fold(0i32, |d, c| {
            let d = d + i32::from(c == '{' || c == '[') - i32::from(c == '}' || c == ']');
            (d >= 0).then_some(d)
        });
        assert_eq!(depth, Some(0), "unbalanced: {json}");
        assert_eq!(
            super::verbs::to_json(&Probe::default()),
            r#"{"devices": [], "reason": null, "rdma_core": false}"#
        );
    }
}
