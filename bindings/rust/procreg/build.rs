// SPDX-License-Identifier: BSD-2-Clause
//! The README's Rust example, for tests/readme.rs to build and run: it
//! cannot rot. Without the README (the crate outside its repository) the
//! file is a compile error, which only that test includes.
use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    let readme = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../../README.md");
    println!("cargo:rerun-if-changed={}", readme.display());
    let text = fs::read_to_string(&readme).unwrap_or_default();
    let example = text
        .split_once("<!-- example-rust -->\n```rust\n")
        .and_then(|(_, rest)| rest.split_once("```\n<!-- /example-rust -->"))
        .map(|(code, _)| code.to_string())
        .unwrap_or_else(|| "compile_error!(\"README.md: no Rust example between <!-- example-rust --> markers\");\n".into());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("readme_example.rs");
    fs::write(out, example).unwrap();
}
