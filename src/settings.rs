//! Transport settings through the facade: the keys every built-in transport
//! has, and their check before anything opens.
//!
//! Each transport owns its settings (`xfer_tcp::TcpAttr`,
//! `xfer_verbs::VerbsAttr`, `xfer_shm::ShmConfig`) and parses the keys under its prefix; the
//! facade only routes a key to the transport its prefix names, so that a
//! typo is refused with the key named rather than left unread.

use crate::{Error, Params, Result, Setting};

/// The transports whose settings a key may name (`tcp.iface`,
/// `verbs.device`), built in or not: settings for a transport this build
/// lacks are checked by nobody and harm nobody.
pub const TRANSPORTS: &[&str] = &["tcp", "verbs", "shm"];

/// Checks the setting `key` = `value`: its transport has the key and the
/// value parses. [`Error::InvalidSetting`] names the key otherwise (an
/// unknown transport prefix included). What `xfer_domain_attr_set` of the C
/// ABI and [`open`](crate::open) check.
///
/// ```
/// assert!(xfer::check_param("tcp.coalesce", "0").is_ok());
/// let e = xfer::check_param("tcp.coalesse", "0").unwrap_err();
/// assert!(e.to_string().contains("tcp.coalesse"));
/// assert!(xfer::check_param("tcp.coalesce", "many").is_err());
/// assert!(xfer::check_param("udp.port", "1").is_err());
/// ```
pub fn check_param(key: &str, value: &str) -> Result<()> {
    match xfer_core::unstable::params::prefix(key) {
        Some("tcp") => xfer_tcp::TcpAttr::default().set(key, value),
        Some("shm") => xfer_shm::ShmConfig::default().set(key, value),
        #[cfg(feature = "verbs")]
        Some("verbs") => xfer_verbs::VerbsAttr::default().set(key, value),
        Some(p) if TRANSPORTS.contains(&p) => Ok(()),
        _ => Err(Error::InvalidSetting(
            format!(
                "{key}: not a transport setting (keys are TRANSPORT.NAME, transports {}; `xfer-info` lists every key)",
                TRANSPORTS.join(", ")
            )
            .into(),
        )),
    }
}

/// [`check_param`] of every entry.
pub fn check_params(params: &Params) -> Result<()> {
    params.iter().try_for_each(|(k, v)| check_param(k, v))
}

/// Every setting of every built-in transport, with its key, environment
/// variable, effective value (defaults, then the environment, then
/// `params`; a bad entry of `params` is skipped here, [`check_params`]
/// reports it) and doc: what `xfer-info` lists.
pub fn transport_settings(params: &Params) -> Vec<Setting> {
    let mut tcp = xfer_tcp::TcpAttr::from_env();
    for (k, v) in params.under(xfer_tcp::TcpAttr::PREFIX) {
        let _ = tcp.set(k, v);
    }
    #[allow(unused_mut)]
    let mut all = tcp.settings();
    #[cfg(feature = "verbs")]
    {
        let mut verbs = xfer_verbs::VerbsAttr::from_env();
        for (k, v) in params.under(xfer_verbs::VerbsAttr::PREFIX) {
            let _ = verbs.set(k, v);
        }
        all.extend(verbs.settings());
    }
    let mut shm = xfer_shm::ShmConfig::from_env().unwrap_or_default();
    for (k, v) in params.under(xfer_shm::ShmConfig::PREFIX) {
        let _ = shm.set(k, v);
    }
    all.extend(shm.settings());
    all
}

/// [`transport_settings`] at their defaults, without the environment.
pub fn default_transport_settings() -> Vec<Setting> {
    #[allow(unused_mut)]
    let mut all = xfer_tcp::TcpAttr::default().settings();
    #[cfg(feature = "verbs")]
    all.extend(xfer_verbs::VerbsAttr::default().settings());
    all.extend(xfer_shm::ShmConfig::default().settings());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_key_is_accepted_and_its_typo_refused() {
        let all = default_transport_settings();
        assert!(all.iter().any(|s| s.key == Some("tcp.iface")));
        #[cfg(feature = "verbs")]
        assert!(all.iter().any(|s| s.key == Some("verbs.device")));
        for s in &all {
            let key = s.key.expect("a transport setting has a key");
            let value = match key {
                "tcp.addr" => "127.0.0.1",
                "verbs.addr" => "10.0.0.1",
                _ => "1",
            };
            check_param(key, value).unwrap_or_else(|e| panic!("{key}={value}: {e}"));
            let typo = format!("{key}x");
            let Err(Error::InvalidSetting(why)) = check_param(&typo, value) else {
                panic!("{typo} accepted");
            };
            assert!(why.contains(&typo), "{why}");
        }
        assert!(check_param("iface", "eth0").is_err(), "a key needs its transport");
    }

    #[test]
    fn params_show_in_the_settings_listed() {
        let mut p = Params::new();
        p.set("tcp.coalesce", "3");
        let listed = transport_settings(&p);
        let row = listed.iter().find(|s| s.key == Some("tcp.coalesce")).expect("listed");
        assert_eq!(row.value, "3");
        assert_eq!(row.env, "XFER_TCP_COALESCE");
    }
}
