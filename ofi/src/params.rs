//! Transport settings for libfabric programs, libfabric's way: every key
//! of every transport (`tcp.iface`) is also read from `FI_XFER_<KEY>`
//! (`FI_XFER_TCP_IFACE`), the name `fi_param_get` gives a parameter of the
//! provider `xfer`, and passed to the xfer domain as its params. The
//! `XFER_*` variables keep working underneath: an `FI_XFER_*` one that is
//! set overrides its `XFER_*` twin. So does `FI_XFER_PROVIDER` over
//! `XFER_PROVIDER`: the xfer provider `fi_getinfo` offers alone.

use xfer_facade::Params;

/// The libfabric environment variable of `key`: `FI_XFER_TCP_IFACE` for `tcp.iface`.
pub(crate) fn fi_env_name(key: &str) -> String {
    format!("FI_{}_{}", crate::PROVIDER_NAME, key.replace('.', "_")).to_ascii_uppercase()
}

/// The settings set through `FI_XFER_*` variables (empty ones ignored).
pub(crate) fn from_env() -> Params {
    let mut params = Params::new();
    for s in xfer_facade::default_transport_settings() {
        let Some(key) = s.key else { continue };
        if let Some(v) = std::env::var(fi_env_name(key)).ok().filter(|v| !v.trim().is_empty()) {
            params.set(key, v);
        }
    }
    params
}

/// The xfer provider forced: `FI_XFER_PROVIDER`, else `XFER_PROVIDER`
/// (`DomainAttr::provider`); `None` when neither is set (empty ones ignored).
pub(crate) fn provider() -> Option<String> {
    std::env::var(fi_env_name("provider"))
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .or_else(|| xfer_facade::DomainAttr::from_env().provider)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fi_names_follow_libfabric_and_reach_the_params() {
        assert_eq!(fi_env_name("tcp.iface"), "FI_XFER_TCP_IFACE");
        assert_eq!(fi_env_name("verbs.device"), "FI_XFER_VERBS_DEVICE");
        std::env::set_var("FI_XFER_TCP_COALESCE", "5");
        let p = from_env();
        std::env::remove_var("FI_XFER_TCP_COALESCE");
        assert_eq!(p.get("tcp.coalesce"), Some("5"));
        assert_eq!(p.get("tcp.iface"), None);
    }
}
