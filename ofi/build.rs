//! Generates the libfabric structures from the installed headers
//! (libfabric-dev, Debian 12: libfabric 1.17) with bindgen, so every
//! struct the provider fills has the layout the loading libfabric expects.

use bindgen::callbacks::{IntKind, ParseCallbacks};

/// libfabric's capability and flag macros are `1ULL << n`: keep them `u64`.
#[derive(Debug)]
struct Flags64;

impl ParseCallbacks for Flags64 {
    fn int_macro(&self, name: &str, _value: i64) -> Option<IntKind> {
        if name.starts_with("FI_E") && name != "FI_EVENT" {
            Some(IntKind::I32)
        } else {
            Some(IntKind::U64)
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src/fabric.h");
    println!("cargo:rustc-link-lib=fabric");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("src/fabric.h")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_function("fi_dupinfo|fi_freeinfo|fi_strerror")
        .allowlist_var("FI_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .layout_tests(false)
        .derive_default(true)
        .parse_callbacks(Box::new(Flags64))
        .generate()
        .expect("bindgen on <rdma/fabric.h> (install libfabric-dev and libclang-dev: scripts/setup.sh)");
    bindings
        .write_to_file(out.join("fi.rs"))
        .expect("writing the libfabric bindings");
}
