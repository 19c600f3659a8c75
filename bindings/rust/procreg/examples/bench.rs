// SPDX-License-Identifier: BSD-2-Clause
//! Lookup through procreg beside a HashMap lookup of the same names.
//!
//!     PROCREG_BUILD_DIR=build LD_LIBRARY_PATH=build \
//!         cargo run --release --offline --example bench [-- NAMES ROUNDS]
//!
//! Starts a private procregd (from PROCREG_BUILD_DIR) in a temporary
//! directory, registers NAMES names (10^4) with 24 bytes of metadata each,
//! and times, round after round, one pass of hits over all the names
//! through: HashMap::get (std's SipHash map of String to (pid, metadata)),
//! contains (the library's lookup, no result), lookup_in (the entry and
//! metadata into the caller's buffer: no allocation) and lookup (the
//! metadata owned: one allocation), and lookup_many of 64 names a call.
//! Prints ns per lookup: median of the
//! rounds, and min-max. A benchmark, not a test: on a shared machine the
//! figures move.
use std::collections::HashMap;
use std::hint::black_box;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use procreg::{Options, Registry};

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

fn pass(names: &[String], mut f: impl FnMut(&str)) -> f64 {
    let t = Instant::now();
    for n in names {
        f(n);
    }
    t.elapsed().as_nanos() as f64 / names.len() as f64
}

fn main() {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let rounds: usize = args.next().map_or(21, |a| a.parse().unwrap());
    let build = std::env::var_os("PROCREG_BUILD_DIR").expect("set PROCREG_BUILD_DIR to the build tree with procregd");
    let dir = std::env::temp_dir().join(format!("procreg-rs-bench.{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let mut daemon = Command::new(std::path::Path::new(&build).join("procregd"))
        .args(["--foreground", "--scope", "bench", "--dir"])
        .arg(&dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let opts = Options { scope: Some("bench"), dir: Some(&dir) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let reg = loop {
        if let Ok(r) = Registry::open_with(&opts) {
            if r.sync().is_ok() {
                break r;
            }
        }
        assert!(Instant::now() < deadline, "procregd did not start");
        std::thread::sleep(Duration::from_millis(10));
    };

    let mut names: Vec<String> = (0..count).map(|i| format!("svc.{i:06}.example")).collect();
    let mut map: HashMap<String, (i32, Vec<u8>)> = HashMap::new();
    for n in &names {
        let meta = format!("unix:/run/{:<14}", &n[4..10]).into_bytes();
        reg.register(n, &meta).unwrap();
        map.insert(n.clone(), (std::process::id() as i32, meta));
    }
    // Every name once, in another order than they were made.
    let (odd, even): (Vec<_>, Vec<_>) = names.drain(..).enumerate().partition(|(i, _)| i % 2 == 1);
    names = odd.into_iter().chain(even).map(|(_, n)| n).collect();
    let mut buf = [0u8; procreg::META_MAX];
    for n in &names {
        let e = reg.lookup_in(n, &mut buf).unwrap().unwrap();
        assert_eq!(&*e.meta, &map[n].1[..]);
    }

    let kinds = ["HashMap::get", "contains", "lookup_in", "lookup", "lookup_many/64"];
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for _ in 0..rounds {
        t[0].push(pass(&names, |n| {
            black_box(map.get(black_box(n)));
        }));
        t[1].push(pass(&names, |n| {
            black_box(reg.contains(black_box(n)).unwrap());
        }));
        t[2].push(pass(&names, |n| {
            black_box(reg.lookup_in(black_box(n), &mut buf).unwrap());
        }));
        t[3].push(pass(&names, |n| {
            black_box(reg.lookup(black_box(n)).unwrap());
        }));
        let t0 = Instant::now();
        for b in names.chunks(64) {
            black_box(reg.lookup_many(black_box(b)).unwrap());
        }
        t[4].push(t0.elapsed().as_nanos() as f64 / names.len() as f64);
    }
    println!("rust, {count} names, {rounds} rounds; ns per lookup: median (min-max)");
    let mut med = Vec::new();
    for (k, r) in kinds.iter().zip(t.iter_mut()) {
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        med.push(r[r.len() / 2]);
        println!("  {:<15} {:7.1}  ({:.1}-{:.1})", k, r[r.len() / 2], r[0], r[r.len() - 1]);
    }
    println!("  lookup_in / HashMap::get  {:.2}x", med[2] / med[0]);
    println!("  lookup / HashMap::get     {:.2}x", med[3] / med[0]);

    drop(reg);
    unsafe { kill(daemon.id() as i32, 15) };
    daemon.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
