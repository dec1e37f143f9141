//! Transport settings as key/value pairs, libfabric's `fi_param` style.
//!
//! Core knows no transport's settings: a transport owns its typed settings
//! (the TCP provider's `TcpAttr`, the verbs provider's `VerbsAttr`) and
//! parses the keys under its prefix (`tcp.iface`, `verbs.device`) from the
//! [`Params`] the domain and endpoint attributes carry. Each key has an
//! `XFER_*` environment variable (`tcp.iface`: `XFER_TCP_IFACE`, see
//! [`env_name`]); a transport applies its defaults, then the environment,
//! then the domain's params, then the endpoint's.

use std::collections::BTreeMap;

/// Transport settings by key (`tcp.iface` = `eth0`), values as text.
///
/// A key is `TRANSPORT.NAME`; the transport whose prefix it carries parses
/// and checks it when a domain or endpoint opens (an unknown key or a value
/// that does not parse is refused with
/// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming the key);
/// other transports leave it alone, so one set of params can serve whichever
/// provider is chosen.
///
/// ```
/// let mut attr = xfer_core::EndpointAttr::from_env();
/// attr.params.set("tcp.iface", "eth0").set("tcp.coalesce", "0");
/// assert_eq!(attr.params.get("tcp.coalesce"), Some("0"));
/// assert_eq!(attr.params.under("tcp").count(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Params(BTreeMap<String, String>);

impl Params {
    /// No settings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, replacing an earlier value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.0.insert(key.into(), value.into());
        self
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.0.remove(key)
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every key and value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The settings of `transport` (keys `transport.NAME`), full keys and values.
    pub fn under<'a>(&'a self, transport: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.iter().filter(move |(k, _)| prefix(k) == Some(transport))
    }

    /// These params with `over`'s entries replacing or adding to them (an
    /// endpoint's over its domain's).
    pub fn overlaid(&self, over: &Params) -> Params {
        let mut all = self.clone();
        all.0.extend(over.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        all
    }
}

/// The transport prefix of `key` (`tcp` of `tcp.iface`); `None` without a dot.
pub fn prefix(key: &str) -> Option<&str> {
    key.split_once('.').map(|(p, _)| p)
}

/// The environment variable of `key`: `XFER_` and the key in capitals with
/// dots as underscores (`tcp.iface`: `XFER_TCP_IFACE`).
pub fn env_name(key: &str) -> String {
    format!("XFER_{}", key.replace('.', "_").to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_their_environment_variables() {
        assert_eq!(env_name("tcp.iface"), "XFER_TCP_IFACE");
        assert_eq!(env_name("verbs.fault_ignore_credit"), "XFER_VERBS_FAULT_IGNORE_CREDIT");
        assert_eq!(prefix("verbs.device"), Some("verbs"));
        assert_eq!(prefix("device"), None);
    }

    #[test]
    fn endpoint_params_override_the_domains() {
        let mut domain = Params::new();
        domain.set("tcp.iface", "eth0").set("tcp.coalesce", "0");
        let mut ep = Params::new();
        ep.set("tcp.iface", "ib0").set("verbs.port", "2");
        let all = domain.overlaid(&ep);
        assert_eq!(all.get("tcp.iface"), Some("ib0"));
        assert_eq!(all.get("tcp.coalesce"), Some("0"));
        let tcp: Vec<_> = all.under("tcp").collect();
        assert_eq!(tcp, [("tcp.coalesce", "0"), ("tcp.iface", "ib0")]);
        assert_eq!(all.under("verbs").count(), 1);
        assert_eq!(all.under("tc").count(), 0, "a prefix is a whole word");
    }
}
