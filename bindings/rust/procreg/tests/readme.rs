// SPDX-License-Identifier: BSD-2-Clause
//! The README's Rust example (extracted by build.rs), run as a process of
//! its own against a private daemon: this test binary, started again with
//! PROCREG_README_CHILD set, runs the example's main().
mod common;

mod example {
    include!(concat!(env!("OUT_DIR"), "/readme_example.rs"));
    pub fn run() {
        main().unwrap()
    }
}

#[test]
fn readme_example() {
    if std::env::var_os("PROCREG_README_CHILD").is_some() {
        example::run();
        return;
    }
    let d = common::Daemon::start();
    let child = d
        .command(std::env::current_exe().unwrap())
        .args(["--exact", "readme_example", "--nocapture", "--test-threads=1", "--quiet"])
        .env("PROCREG_README_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let out = String::from_utf8(out.stdout).unwrap();
    let want = format!("example.payments: pid {pid} at unix:/run/payments.sock\ngone: true\n");
    assert!(out.contains(&want), "{out}");
}
