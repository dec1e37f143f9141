//! `xfer-info`: what xfer sees on this machine, like libfabric's `fi_info`.
//!
//! Lists the providers compiled in (in order of preference, whether each can
//! run here and why), the one `xfer::open_default()` picks, the name of an
//! endpoint opened on it, and every `XFER_*` setting with its effective value
//! and default.
//!
//! ```text
//! cargo run --bin xfer-info              # human-readable
//! cargo run --bin xfer-info -- --json    # one JSON object, for scripts
//! XFER_TCP_ADDR=127.0.0.1 xfer-info      # see the effect of a setting
//! ```
//!
//! Exit status: 0 when an endpoint could be opened, 1 when not (the report
//! still lists providers and settings, with the error), 2 on bad arguments.

use std::io::Write;
use std::process::ExitCode;

use xfer::{CqAttr, DomainAttr, EndpointAttr, ProviderInfo, Setting};

const USAGE: &str = "usage: xfer-info [--json]";

/// One row of the settings table.
struct Row {
    setting: Setting,
    default: String,
}

/// What `open_default` gave: the provider it picked, if any, and the name
/// of an endpoint opened on it, or why that failed.
struct Opened {
    provider: Option<&'static str>,
    endpoint: Result<Name, String>,
}

/// An endpoint's name.
struct Name {
    hex: String,
    /// A provider-specific readable form, when there is one.
    text: Option<String>,
}

fn main() -> ExitCode {
    xfer::init_logging();
    let mut json = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
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

    let providers = xfer::info();
    let opened = open();
    let rows = settings();
    let mut out = std::io::stdout().lock();
    let written = if json {
        writeln!(out, "{}", to_json(&providers, &opened, &rows))
    } else {
        print_text(&mut out, &providers, &opened, &rows)
    };
    // A reader that stops early (`xfer-info | head`) is not an error.
    if let Err(e) = written.and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("xfer-info: writing the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    match opened.endpoint {
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
    let domain = match xfer::open_default() {
        Ok(d) => d,
        Err(e) => {
            return Opened {
                provider: None,
                endpoint: Err(format!("opening a domain: {e}")),
            }
        }
    };
    Opened {
        provider: Some(domain.provider()),
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
        _ => None,
    };
    Ok(Name {
        hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        text,
    })
}

/// Every setting, effective (defaults overridden by the environment) next to
/// its default.
fn settings() -> Vec<Row> {
    let effective = [
        DomainAttr::from_env().settings(),
        CqAttr::from_env().settings(),
        EndpointAttr::from_env().settings(), // includes the TCP provider's
    ];
    let defaults: Vec<Setting> = [
        DomainAttr::default().settings(),
        CqAttr::default().settings(),
        EndpointAttr::default().settings(),
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

fn print_text(out: &mut impl Write, providers: &[ProviderInfo], opened: &Opened, rows: &[Row]) -> std::io::Result<()> {
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

    writeln!(out, "settings (XFER_* environment variables):")?;
    let header = ["VARIABLE", "VALUE", "DEFAULT", "DESCRIPTION"];
    let table: Vec<[&str; 4]> = rows
        .iter()
        .map(|r| [r.setting.env, &r.setting.value, &r.default, r.setting.doc])
        .collect();
    let mut w = [0; 3];
    for cells in std::iter::once(&header).chain(&table) {
        for (wi, cell) in w.iter_mut().zip(cells) {
            *wi = (*wi).max(cell.len());
        }
    }
    let [w0, w1, w2] = w;
    for [env, value, default, doc] in std::iter::once(header).chain(table) {
        writeln!(out, "  {env:w0$}  {value:w1$}  {default:w2$}  {doc}")?;
    }
    Ok(())
}

fn to_json(providers: &[ProviderInfo], opened: &Opened, rows: &[Row]) -> String {
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
                r#"{{"env": {}, "value": {}, "default": {}, "description": {}}}"#,
                quote(r.setting.env),
                quote(&r.setting.value),
                quote(&r.default),
                quote(r.setting.doc)
            )
        })
        .collect();
    format!(
        "{{\n  \"providers\": [\n    {}\n  ],\n  \"chosen\": {chosen},\n  \"endpoint\": {endpoint},\n  \
         \"error\": {error},\n  \"settings\": [\n    {}\n  ]\n}}",
        providers.join(",\n    "),
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
