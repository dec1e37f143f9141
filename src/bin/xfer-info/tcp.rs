//! The TCP section of `xfer-info`: every interface (name, state, kind,
//! addresses) with the verdict of the listening-address choice on it, and
//! the address an endpoint listens on and by which rule.

use std::io::Write;

use xfer_tcp::iface::{self, Choice, Interface};

use super::quote;

/// The host's interfaces, each with its kind, and the choice over them.
pub struct Section {
    /// Interfaces in the kernel's order, with [`iface::link_kind`].
    pub ifaces: Vec<(Interface, &'static str)>,
    /// The choice an endpoint opened with the environment's attributes makes.
    pub choice: Choice,
    /// Why the interfaces could not be listed, if they could not.
    pub error: Option<String>,
}

/// Lists the interfaces and makes the choice with `XFER_TCP_*` from the environment.
pub fn section() -> Section {
    let (list, error) = match iface::interfaces() {
        Ok(list) => (list, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let choice = iface::choose(&list, &xfer::TcpAttr::from_env());
    let ifaces = list
        .into_iter()
        .map(|i| {
            let kind = iface::link_kind(&i.name);
            (i, kind)
        })
        .collect();
    Section { ifaces, choice, error }
}

fn state(i: &Interface) -> &'static str {
    match (i.up, i.running) {
        (false, _) => "down",
        (true, false) => "no-carrier",
        (true, true) => "up",
    }
}

fn addresses(i: &Interface) -> Vec<String> {
    i.addrs.iter().map(ToString::to_string).collect()
}

/// The listening address and its rule, or the error opening an endpoint would get.
fn listen_line(s: &Section) -> String {
    match &s.choice.listen {
        Ok(l) => {
            let on = l.iface.as_deref().map(|i| format!(" on {i}")).unwrap_or_default();
            format!("{}{on} ({})", l.addr, l.rule)
        }
        Err(e) => format!("none: {e}"),
    }
}

pub fn print_text(out: &mut impl Write, s: &Section) -> std::io::Result<()> {
    writeln!(out, "tcp listens on: {}", listen_line(s))?;
    if let Some(e) = &s.error {
        writeln!(out, "tcp interfaces: cannot list them: {e}")?;
        return Ok(());
    }
    writeln!(out, "tcp interfaces:")?;
    let rows: Vec<[String; 5]> = s
        .ifaces
        .iter()
        .zip(&s.choice.verdicts)
        .map(|((i, kind), verdict)| {
            let addrs = addresses(i);
            [
                i.name.clone(),
                state(i).to_string(),
                kind.to_string(),
                if addrs.is_empty() { "-".into() } else { addrs.join(" ") },
                verdict.to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "STATE", "KIND", "ADDRESSES", "VERDICT"].map(String::from);
    let mut w = [0; 4];
    for cells in std::iter::once(&header).chain(&rows) {
        for (wi, cell) in w.iter_mut().zip(cells) {
            *wi = (*wi).max(cell.len());
        }
    }
    let [w0, w1, w2, w3] = w;
    for [name, state, kind, addrs, verdict] in std::iter::once(&header).chain(&rows) {
        writeln!(out, "  {name:w0$}  {state:w1$}  {kind:w2$}  {addrs:w3$}  {verdict}")?;
    }
    if !s.choice.missing.is_empty() {
        writeln!(
            out,
            "  XFER_TCP_IFACE names no such interface: {}",
            s.choice.missing.join(", ")
        )?;
    }
    Ok(())
}

pub fn to_json(s: &Section) -> String {
    let (listen, iface, rule, error) = match &s.choice.listen {
        Ok(l) => (
            quote(&l.addr.to_string()),
            l.iface.as_deref().map_or_else(|| "null".to_string(), quote),
            quote(&l.rule.to_string()),
            "null".to_string(),
        ),
        Err(e) => ("null".into(), "null".into(), "null".into(), quote(&e.to_string())),
    };
    let ifaces: Vec<String> = s
        .ifaces
        .iter()
        .zip(&s.choice.verdicts)
        .map(|((i, kind), verdict)| {
            let addrs: Vec<String> = addresses(i).iter().map(|a| quote(a)).collect();
            format!(
                r#"{{"name": {}, "index": {}, "state": {}, "kind": {}, "addresses": [{}], "used": {}, "verdict": {}}}"#,
                quote(&i.name),
                i.index,
                quote(state(i)),
                quote(kind),
                addrs.join(", "),
                *verdict == iface::Verdict::Used,
                quote(&verdict.to_string())
            )
        })
        .collect();
    let missing: Vec<String> = s.choice.missing.iter().map(|m| quote(m)).collect();
    let list_error = s.error.as_deref().map_or_else(|| "null".to_string(), quote);
    format!(
        "{{\"listen\": {listen}, \"iface\": {iface}, \"rule\": {rule}, \"error\": {error}, \"interfaces\": [{}], \
         \"missing\": [{}], \"list_error\": {list_error}}}",
        ifaces.join(", "),
        missing.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use xfer::TcpAttr;
    use xfer_tcp::iface::{choose, IfAddr, Interface};

    use super::Section;

    fn host() -> Vec<Interface> {
        let addr = |s: &str, prefix| IfAddr {
            ip: s.parse::<IpAddr>().unwrap(),
            prefix,
        };
        let i = |name: &str, index, up, addrs| Interface {
            name: name.into(),
            index,
            up,
            running: up,
            loopback: index == 1,
            addrs,
        };
        vec![
            i("lo", 1, true, vec![addr("127.0.0.1", 8), addr("::1", 128)]),
            i("docker0", 2, true, vec![addr("172.17.0.1", 16)]),
            i("eth0", 3, true, vec![addr("10.0.0.5", 24)]),
            i("eth1", 4, false, vec![]),
        ]
    }

    fn section(attr: &TcpAttr) -> Section {
        let list = host();
        let choice = choose(&list, attr);
        let kinds = ["loopback", "bridge", "physical", "physical"];
        Section {
            ifaces: list.into_iter().zip(kinds).collect(),
            choice,
            error: None,
        }
    }

    #[test]
    fn interfaces_as_text() {
        let mut out = Vec::new();
        super::print_text(&mut out, &section(&TcpAttr::default())).unwrap();
        let text = String::from_utf8(out).unwrap();
        for want in [
            "tcp listens on: 10.0.0.5:0 on eth0 (the first interface that is up, not loopback, not a container bridge, with IPv4)\n",
            "  NAME     STATE  KIND      ADDRESSES            VERDICT\n",
            "  lo       up     loopback  127.0.0.1/8 ::1/128  not used: loopback, used only when no other interface is\n",
            "  docker0  up     bridge    172.17.0.1/16        not used: a container or VM network",
            "  eth0     up     physical  10.0.0.5/24          used\n",
            "  eth1     down   physical  -                    not used: down\n",
        ] {
            assert!(text.contains(want), "no {want:?} in:\n{text}");
        }
        let mut listed = TcpAttr::default();
        listed.iface = vec!["ib0".into(), "eth1".into()];
        let mut out = Vec::new();
        super::print_text(&mut out, &section(&listed)).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("tcp listens on: none: "), "{text}");
        assert!(text.contains("XFER_TCP_IFACE names no such interface: ib0\n"), "{text}");
    }

    #[test]
    fn interfaces_as_json() {
        let json = super::to_json(&section(&TcpAttr::default()));
        for want in [
            r#"{"listen": "10.0.0.5:0", "iface": "eth0", "rule": "the first interface"#,
            r#"{"name": "eth0", "index": 3, "state": "up", "kind": "physical", "addresses": ["10.0.0.5/24"], "used": true, "verdict": "used"}"#,
            r#"{"name": "eth1", "index": 4, "state": "down", "kind": "physical", "addresses": [], "used": false, "verdict": "not used: down"}"#,
            r#""missing": [], "list_error": null}"#,
        ] {
            assert!(json.contains(want), "no {want:?} in:\n{json}");
        }
    }
}
