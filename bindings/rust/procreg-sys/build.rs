// SPDX-License-Identifier: BSD-2-Clause
//! Where libprocreg is: PROCREG_BUILD_DIR (a CMake build tree of procreg,
//! whose libprocreg.so is linked and whose headers the layout probe
//! reads), else the system's paths.
//!
//! The layout probe: the structs of src/lib.rs are written by hand from
//! include/procreg.h, so a C program compiled against the header prints
//! every struct's size and every member's offset, and the crate's tests
//! compare them with the Rust declarations. It needs a C compiler ($CC,
//! else cc); without one, or without the header, the probe's output is a
//! compile error, which fails `cargo test` (never the library's build).
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// Every sized struct of procreg.h and its members, as the probe prints them.
const STRUCTS: &[(&str, &[&str])] = &[
    ("procreg_opts", &["sz", "scope", "dir", "socket", "trust_uid"]),
    ("procreg_register_opts", &["sz", "flags", "lease_ms", "lost_signal", "pidfd"]),
    ("procreg_entry", &["sz", "meta", "meta_size", "meta_len", "pid", "node", "flags", "uid",
                        "start_time", "registered_ns", "name"]),
    ("procreg_op", &["sz", "kind", "name", "meta", "meta_len", "flags", "lease_ms",
                     "lost_signal", "pidfd", "result"]),
    ("procreg_join_opts", &["sz", "flags", "pidfd", "lease_ms"]),
    ("procreg_group", &["sz", "name", "members", "local_members"]),
    ("procreg_event", &["sz", "seq", "time_ns", "type", "is_group", "pid", "node", "uid",
                        "start_time", "name"]),
    ("procreg_lost", &["sz", "reason", "winner_pid", "time_ns", "name", "node"]),
    ("procreg_stats", &["sz", "names", "groups", "memberships", "joins", "leaves", "processes",
                        "arena_size", "arena_used", "arena_top", "index_capacity",
                        "grace_periods", "registrations", "unregistrations", "deaths",
                        "reader_slots", "reader_slots_used", "daemon_pid",
                        "daemon_started_ns"]),
];

fn main() {
    println!("cargo:rerun-if-env-changed=PROCREG_BUILD_DIR");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rustc-link-lib=dylib=procreg");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let mut includes = Vec::new();
    if let Some(build) = env::var_os("PROCREG_BUILD_DIR") {
        let build = PathBuf::from(build);
        println!("cargo:rustc-link-search=native={}", build.display());
        println!("cargo:lib_dir={}", build.display());
        includes.push(manifest.join("../../../include"));
        includes.push(build.join("generated"));
    }
    let header = manifest.join("../../../include/procreg.h");
    println!("cargo:rerun-if-changed={}", header.display());

    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <procreg.h>\nint main(void)\n{\n");
    for (s, members) in STRUCTS {
        writeln!(c, "\tprintf(\"pub const {s}: usize = %zu;\\n\", sizeof(struct {s}));").unwrap();
        for m in *members {
            writeln!(c, "\tprintf(\"pub const {s}__{m}: usize = %zu;\\n\", offsetof(struct {s}, {m}));").unwrap();
        }
    }
    c.push_str("\treturn 0;\n}\n");
    let src = out.join("layout_probe.c");
    let exe = out.join("layout_probe");
    fs::write(&src, c).unwrap();
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    for i in &includes {
        cmd.arg("-I").arg(i);
    }
    let probed = cmd
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .ok()
        .filter(|s| s.success())
        .and_then(|_| Command::new(&exe).output().ok())
        .filter(|o| o.status.success());
    let layout = match probed {
        Some(o) => String::from_utf8(o.stdout).unwrap(),
        None => {
            println!("cargo:warning=procreg-sys: the layout probe could not be built with {cc}: its test will not compile");
            "compile_error!(\"procreg-sys: the layout probe (build.rs) could not be compiled against procreg.h: set PROCREG_BUILD_DIR, or install libprocreg's header and a C compiler\");\n".into()
        }
    };
    fs::write(out.join("layout.rs"), layout).unwrap();
}
