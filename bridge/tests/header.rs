//! `include/yuebing.h` is what the pinned cbindgen generates from `bridge/src/ffi/`: the test
//! suite fails when they differ. Regenerate with
//! `YUEBING_BLESS=1 cargo test -p yuebing-bridge --test header`.

use std::path::PathBuf;

#[test]
fn the_committed_header_is_the_generated_one() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read bridge/src/ffi")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = crate_dir.join("../include/yuebing.h");
    if std::env::var_os("YUEBING_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/yuebing.h differs from what cbindgen generates from bridge/src/ffi; run \
         `YUEBING_BLESS=1 cargo test -p yuebing-bridge --test header` and commit the header"
    );
}
