//! Which provider the facade opens, and why not each of the others: the
//! report users read when a transport fell back ([`crate::open_report`],
//! `tracing`, `xfer-info`).

use std::fmt;

use crate::{Error, ProviderInfo, Result};

/// Every provider xfer knows, in order of preference, with the cargo feature
/// that builds it (`None`: always built).
/// The pairs come first: `shm+verbs` serves peers on this host over shared
/// memory and every other peer over verbs, `shm+tcp` likewise over TCP, so
/// each comes before the provider it includes (`verbs`, `tcp`), which
/// serves every peer, this host's too, over the network. `shm` reaches
/// peers on this host only, so it is last: opened only when asked for.
pub const KNOWN: &[(&str, Option<&str>)] = &[
    ("shm+verbs", Some("verbs")),
    ("verbs", Some("verbs")),
    ("shm+tcp", None),
    ("tcp", None),
    ("shm", None),
];

/// What became of one provider when the facade chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Opened; the text says on what (device and port, or sockets).
    Chosen(String),
    /// Cannot run on this machine: no device, port down, no IPv4 address, …
    Unavailable(String),
    /// Could run but failed to open with this error; the next one was tried.
    Failed(Error),
    /// Available, but this provider, preferred to it, was opened first.
    Outranked(&'static str),
    /// `XFER_PROVIDER` (`DomainAttr::provider`) asked for another provider.
    NotRequested(String),
    /// Not compiled in: this build lacks the named cargo feature.
    NotBuilt(&'static str),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Chosen(detail) => write!(f, "chosen: {detail}"),
            Verdict::Unavailable(why) => write!(f, "unavailable: {why}"),
            Verdict::Failed(e) => write!(f, "failed to open: {e}"),
            Verdict::Outranked(by) => write!(f, "available, but {by} is preferred"),
            Verdict::NotRequested(forced) => write!(f, "not requested (XFER_PROVIDER={forced})"),
            Verdict::NotBuilt(feature) => write!(f, "not built (cargo feature `{feature}` off)"),
        }
    }
}

/// One provider and its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The provider's name.
    pub name: &'static str,
    /// Why it was or was not opened.
    pub verdict: Verdict,
}

/// The facade's choice of provider: the one opened, if any, and a verdict
/// for every provider xfer knows, in order of preference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderChoice {
    /// The provider opened, or `None` when none could be.
    pub chosen: Option<&'static str>,
    /// The provider `XFER_PROVIDER` forced, if any.
    pub forced: Option<String>,
    /// Every known provider, in order of preference.
    pub candidates: Vec<Candidate>,
}

impl ProviderChoice {
    /// The verdict on the provider `name`, if xfer knows it.
    pub fn verdict(&self, name: &str) -> Option<&Verdict> {
        self.candidates.iter().find(|c| c.name == name).map(|c| &c.verdict)
    }

    /// `name: verdict` of every provider not chosen, `; `-separated.
    pub fn why_not(&self) -> String {
        let others: Vec<String> = self
            .candidates
            .iter()
            .filter(|c| !matches!(c.verdict, Verdict::Chosen(_)))
            .map(|c| format!("{}: {}", c.name, c.verdict))
            .collect();
        others.join("; ")
    }

    /// Logs the choice: one `info` event naming the provider and why not
    /// the others (a `warn` when none opened), and a `debug` per provider.
    pub fn log(&self) {
        for c in &self.candidates {
            tracing::debug!(provider = c.name, verdict = %c.verdict, "provider considered");
        }
        match self.chosen {
            Some(p) => {
                tracing::info!(provider = p, forced = self.forced.is_some(), why_not = %self.why_not(), "provider chosen")
            }
            None => tracing::warn!(why_not = %self.why_not(), "no provider could be opened"),
        }
    }
}

impl fmt::Display for ProviderChoice {
    /// One line per provider: `name  verdict`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.candidates.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &self.candidates {
            writeln!(f, "{:width$}  {}", c.name, c.verdict)?;
        }
        Ok(())
    }
}

/// Chooses among `infos` (the providers built, in order of preference, as
/// [`crate::info`] gives them): the one `forced` names, else the first
/// available one that `open` opens. Providers of [`KNOWN`] missing from
/// `infos` are reported as not built.
pub(crate) fn choose<D>(
    forced: Option<&str>,
    infos: &[ProviderInfo],
    mut open: impl FnMut(&'static str) -> Result<D>,
) -> (Result<D>, ProviderChoice) {
    let mut choice = ProviderChoice {
        chosen: None,
        forced: forced.map(str::to_owned),
        candidates: Vec::with_capacity(KNOWN.len()),
    };
    let mut opened: Option<Result<D>> = None;
    for &(name, feature) in KNOWN {
        let verdict = match (infos.iter().find(|p| p.name == name), feature) {
            (None, Some(feature)) => Verdict::NotBuilt(feature),
            (None, None) => Verdict::NotBuilt("?"),
            (Some(_), _) if forced.is_some_and(|f| f != name) => {
                Verdict::NotRequested(forced.unwrap_or_default().to_owned())
            }
            (Some(p), _) if forced.is_none() && !p.available => Verdict::Unavailable(p.detail.clone()),
            (Some(_), _) if choice.chosen.is_some() => Verdict::Outranked(choice.chosen.unwrap_or(name)),
            (Some(p), _) => match open(name) {
                Ok(d) => {
                    opened = Some(Ok(d));
                    choice.chosen = Some(name);
                    Verdict::Chosen(p.detail.clone())
                }
                Err(e) if forced.is_some() => {
                    opened = Some(Err(e.clone()));
                    Verdict::Failed(e)
                }
                Err(e) => Verdict::Failed(e),
            },
        };
        choice.candidates.push(Candidate { name, verdict });
    }
    let result = opened.unwrap_or_else(|| {
        Err(match forced {
            Some(f) if KNOWN.iter().all(|&(name, _)| name != f) => Error::NoProvider(format!(
                "unknown provider {f:?} (built in: {})",
                crate::PROVIDERS.join(", ")
            )),
            Some(f) => Error::NoProvider(format!(
                "provider {f:?} not compiled in (xfer built without its `{f}` feature; built in: {})",
                crate::PROVIDERS.join(", ")
            )),
            None => Error::NoProvider(choice.why_not()),
        })
    });
    choice.log();
    (result, choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &'static str, available: bool) -> ProviderInfo {
        ProviderInfo {
            name,
            available,
            detail: if available {
                format!("{name} ok")
            } else {
                format!("no {name} device")
            },
        }
    }

    fn open_ok(_: &'static str) -> Result<()> {
        Ok(())
    }

    /// Every provider of [`KNOWN`] but those `missing`, available but those
    /// `down`.
    fn infos(missing: &[&str], down: &[&str]) -> Vec<ProviderInfo> {
        KNOWN
            .iter()
            .filter(|(name, _)| !missing.contains(name))
            .map(|&(name, _)| info(name, !down.contains(&name)))
            .collect()
    }

    /// The report's line for every provider but `chosen`, as `why_not` writes it.
    fn others(chosen: &str, verdict: impl Fn(&str) -> String) -> String {
        let lines: Vec<String> = KNOWN
            .iter()
            .filter(|(name, _)| *name != chosen)
            .map(|(name, _)| format!("{name}: {}", verdict(name)))
            .collect();
        lines.join("; ")
    }

    #[test]
    fn first_available_is_chosen_and_the_rest_outranked() {
        let (r, c) = choose(None, &infos(&[], &[]), open_ok);
        assert!(r.is_ok());
        assert_eq!(c.chosen, Some("shm+verbs"));
        assert_eq!(c.verdict("shm+verbs"), Some(&Verdict::Chosen("shm+verbs ok".into())));
        assert_eq!(c.verdict("verbs"), Some(&Verdict::Outranked("shm+verbs")));
        assert_eq!(
            c.why_not(),
            others("shm+verbs", |_| "available, but shm+verbs is preferred".into())
        );
    }

    #[test]
    fn unavailable_and_failed_fall_back_with_their_reasons() {
        let (r, c) = choose(None, &infos(&[], &["verbs", "shm+verbs"]), open_ok);
        assert!(r.is_ok());
        assert_eq!(c.chosen, Some("shm+tcp"), "the default without verbs");
        assert_eq!(
            c.why_not(),
            others("shm+tcp", |name| match name {
                "verbs" | "shm+verbs" => format!("unavailable: no {name} device"),
                _ => "available, but shm+tcp is preferred".into(),
            })
        );

        let (r, c) = choose(None, &infos(&[], &[]), |name| match name {
            "verbs" | "shm+verbs" => Err(Error::Os(libc::ENODEV)),
            "shm+tcp" => Err(Error::Os(libc::EPERM)),
            _ => Ok(()),
        });
        assert!(r.is_ok());
        assert_eq!(c.chosen, Some("tcp"), "the next when shm+tcp fails to open");
        assert_eq!(c.verdict("verbs"), Some(&Verdict::Failed(Error::Os(libc::ENODEV))));
        assert_eq!(c.verdict("shm+tcp"), Some(&Verdict::Failed(Error::Os(libc::EPERM))));
    }

    #[test]
    fn not_built_and_forced() {
        let (r, c) = choose(None, &infos(&["verbs"], &[]), open_ok);
        assert!(r.is_ok());
        assert_eq!(c.verdict("verbs"), Some(&Verdict::NotBuilt("verbs")));
        assert!(c.why_not().contains("cargo feature `verbs` off"), "{}", c.why_not());

        let (r, c) = choose(Some("tcp"), &infos(&[], &[]), open_ok);
        assert!(r.is_ok());
        assert_eq!(c.chosen, Some("tcp"));
        assert_eq!(c.verdict("verbs"), Some(&Verdict::NotRequested("tcp".into())));
        assert_eq!(
            c.why_not(),
            others("tcp", |_| "not requested (XFER_PROVIDER=tcp)".into())
        );

        // Forcing an unavailable provider still tries it: the error is the report.
        let (r, c) = choose(Some("verbs"), &infos(&[], &["verbs"]), |name| match name {
            "verbs" => Err(Error::Os(libc::ENODEV)),
            _ => Ok(()),
        });
        assert_eq!(r.err(), Some(Error::Os(libc::ENODEV)));
        assert_eq!(c.chosen, None);
        assert_eq!(c.verdict("tcp"), Some(&Verdict::NotRequested("verbs".into())));

        let (r, _) = choose(Some("verbs"), &infos(&["verbs"], &[]), open_ok);
        assert!(matches!(r, Err(Error::NoProvider(m)) if m.contains("not compiled in")));
    }

    #[test]
    fn nothing_opens() {
        let (r, c) = choose(None, &infos(&[], &["verbs", "shm+verbs"]), |_| {
            Err::<(), _>(Error::Os(libc::EMFILE))
        });
        let Err(Error::NoProvider(why)) = r else {
            panic!("opened something")
        };
        assert!(
            why.starts_with("shm+verbs: unavailable: no shm+verbs device; verbs: unavailable: no verbs device; shm+tcp: failed to open"),
            "{why}"
        );
        assert_eq!(c.chosen, None);
        // Names are padded to the longest, `shm+verbs`.
        assert!(c.to_string().starts_with("shm+verbs  unavailable"), "{c}");
    }
}
