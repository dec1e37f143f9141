//! The committed C header must be exactly what cbindgen generates from the
//! crate's source. Regenerate it with:
//!
//! ```sh
//! XFER_BLESS=1 cargo test -p xfer-capi --test header
//! ```

use std::path::Path;

fn generate() -> String {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("read capi/cbindgen.toml");
    // Parsing from lib.rs (following its `mod` declarations) instead of
    // `with_crate` needs no `cargo metadata` run.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen failed to generate the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn committed_header_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/xfer.h");
    let fresh = generate();
    if std::env::var_os("XFER_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/xfer.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/xfer.h is stale (or missing): the C ABI in capi/src changed.\n\
         Regenerate it with:  XFER_BLESS=1 cargo test -p xfer-capi --test header\n\
         and commit the result."
    );
}

/// Every function and constant in the header carries its documentation.
#[test]
fn every_function_is_documented() {
    let fresh = generate();
    let lines: Vec<&str> = fresh.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let decl = line.starts_with("int ")
            || line.starts_with("uint32_t ")
            || line.starts_with("const char *")
            || line.starts_with("#define XFER_");
        if decl && !line.starts_with("#define XFER_H") {
            let above = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .copied()
                .unwrap_or("");
            assert!(above.trim_end().ends_with("*/"), "undocumented in the header: {line}");
        }
    }
}
