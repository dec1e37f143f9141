//! A transport's plain settings, each described once: a row of a table
//! ([`Knob`], made with [`knobs!`](crate::knobs!)) names its key, environment
//! variable, meaning and field, and the same table sets it from a key's
//! text ([`set`]), from the environment ([`apply_env`]) and lists it for
//! `xfer-info` ([`rows`]). A setting whose text means more than a value
//! (an address list, `auto`) stays in its transport's own code.

use std::str::FromStr;

use crate::attr::{env_value, param_value, Setting};
use crate::error::Error;

/// A setting's value as text goes: parsed as the environment takes it
/// (sizes with `k`/`M`/`g`), shown as it is.
pub trait KnobValue {
    /// Parses `raw` as the value of setting `key`.
    fn set_text(&mut self, key: &str, raw: &str) -> Result<(), Error>;
    /// Takes environment variable `env` when it is set and parses (else
    /// logs and ignores it).
    fn set_env(&mut self, env: &str);
    /// The value as `xfer-info` shows it.
    fn text(&self) -> String;
}

impl<T: FromStr + ToString> KnobValue for T {
    fn set_text(&mut self, key: &str, raw: &str) -> Result<(), Error> {
        *self = param_value(key, raw)?;
        Ok(())
    }

    fn set_env(&mut self, env: &str) {
        if let Some(v) = env_value(env) {
            *self = v;
        }
    }

    fn text(&self) -> String {
        self.to_string()
    }
}

/// One plain setting of attribute struct `A`.
pub struct Knob<A> {
    /// Its key (`tcp.sockbuf`).
    pub key: &'static str,
    /// Its environment variable (`XFER_TCP_SOCKBUF`).
    pub env: &'static str,
    /// What it controls.
    pub doc: &'static str,
    /// Its field, to read.
    pub get: fn(&A) -> &dyn KnobValue,
    /// Its field, to set.
    pub set: fn(&mut A) -> &mut dyn KnobValue,
}

/// A table of [`Knob`]s of attribute struct `A`, a row a field: its name
/// (the key is the prefix, a dot and the name), its environment variable
/// and what it controls.
///
/// ```ignore
/// const KNOBS: &[Knob<TcpAttr>] = knobs! { TcpAttr, "tcp":
///     sockbuf "XFER_TCP_SOCKBUF"
///         "SO_SNDBUF/SO_RCVBUF (0: kernel default)";
/// };
/// ```
#[macro_export]
macro_rules! knobs {
    ($attr:ty, $prefix:literal: $($field:ident $env:literal $doc:literal;)*) => {
        &[$($crate::unstable::knob::Knob::<$attr> {
            key: concat!($prefix, ".", stringify!($field)),
            env: $env,
            doc: $doc,
            get: |a| &a.$field,
            set: |a| &mut a.$field,
        },)*]
    };
}

/// Sets the knob of `knobs` whose key is `key` in `a` from `raw`; `None`
/// when none is.
pub fn set<A>(knobs: &[Knob<A>], a: &mut A, key: &str, raw: &str) -> Option<Result<(), Error>> {
    let k = knobs.iter().find(|k| k.key == key)?;
    Some((k.set)(a).set_text(key, raw))
}

/// Sets every knob of `knobs` in `a` whose environment variable is set.
pub fn apply_env<A>(knobs: &[Knob<A>], a: &mut A) {
    for k in knobs {
        (k.set)(a).set_env(k.env);
    }
}

/// The knobs' rows for `xfer-info`, with their values in `a`.
pub fn rows<'a, A>(knobs: &'a [Knob<A>], a: &'a A) -> impl Iterator<Item = Setting> + 'a {
    knobs.iter().map(move |k| Setting {
        key: Some(k.key),
        env: k.env,
        value: (k.get)(a).text(),
        doc: k.doc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Attr {
        depth: u32,
        bytes: usize,
    }

    const KNOBS: &[Knob<Attr>] = crate::knobs! { Attr, "t":
        depth "XFER_KNOB_TEST_DEPTH" "a depth";
        bytes "XFER_KNOB_TEST_BYTES" "a size";
    };

    #[test]
    fn a_table_sets_its_fields_from_keys_and_the_environment_and_lists_them() {
        let mut a = Attr::default();
        assert!(set(KNOBS, &mut a, "t.bytes", "64k").unwrap().is_ok());
        assert_eq!(a.bytes, 64 << 10);
        let bad = set(KNOBS, &mut a, "t.depth", "deep").unwrap();
        assert!(
            matches!(bad, Err(Error::InvalidSetting(ref m)) if m.contains("t.depth")),
            "{bad:?}"
        );
        assert!(set(KNOBS, &mut a, "t.other", "1").is_none());
        std::env::set_var("XFER_KNOB_TEST_DEPTH", "7");
        std::env::set_var("XFER_KNOB_TEST_BYTES", "lots");
        apply_env(KNOBS, &mut a);
        std::env::remove_var("XFER_KNOB_TEST_DEPTH");
        std::env::remove_var("XFER_KNOB_TEST_BYTES");
        assert_eq!((a.depth, a.bytes), (7, 64 << 10), "an unparsable variable is ignored");
        let rows: Vec<Setting> = rows(KNOBS, &a).collect();
        assert_eq!(rows[0].key, Some("t.depth"));
        assert_eq!((rows[0].env, rows[0].value.as_str()), ("XFER_KNOB_TEST_DEPTH", "7"));
        assert_eq!((rows[1].doc, rows[1].value.as_str()), ("a size", "65536"));
    }
}
