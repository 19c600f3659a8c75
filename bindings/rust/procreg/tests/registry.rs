// SPDX-License-Identifier: BSD-2-Clause
mod common;

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Daemon;
use procreg::{errno, Error, EventKind, RegisterOptions, Registry};

fn my_pid() -> i32 {
    std::process::id() as i32
}

fn start_time_of_self() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    stat.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn lookup_hit_miss_borrowed_and_owned() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    assert_eq!(reg.lookup("svc.pay").unwrap(), None);
    assert!(!reg.contains("svc.pay").unwrap());
    let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    reg.register("svc.pay", b"unix:/run/pay.sock").unwrap();
    let e = reg.lookup("svc.pay").unwrap().unwrap();
    assert!(matches!(e.meta, Cow::Owned(_)));
    assert_eq!(&*e.name, b"svc.pay");
    assert_eq!(&*e.meta, b"unix:/run/pay.sock");
    assert_eq!((e.pid, e.node, e.flags), (my_pid(), 0, 0));
    assert_eq!(e.start_time, start_time_of_self());
    assert!(e.registered_ns + 1_000_000_000 >= before);
    assert!(reg.contains("svc.pay").unwrap());

    let mut buf = [0u8; procreg::META_MAX];
    let b = reg.lookup_in("svc.pay", &mut buf).unwrap().unwrap();
    assert!(matches!(b.meta, Cow::Borrowed(_)));
    assert_eq!(b, e);
    let owned = b.into_owned();
    assert_eq!(owned, e);
    // Too small a buffer is an error, never a silently cut value.
    let mut small = [0u8; 4];
    assert_eq!(reg.lookup_in("svc.pay", &mut small).unwrap_err().errno(), errno::ERANGE);
    assert_eq!(reg.lookup_in("svc.none", &mut small).unwrap(), None);
}

#[test]
fn names_and_metadata_limits() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    assert_eq!(reg.register("", b"").unwrap_err(), Error::INVALID);
    assert_eq!(reg.register("a\0b", b"").unwrap_err(), Error::INVALID);
    let long = "n".repeat(procreg::NAME_MAX + 1);
    assert_eq!(reg.lookup(&long).unwrap_err().errno(), errno::ENAMETOOLONG);
    let max = "n".repeat(procreg::NAME_MAX);
    reg.register(&max, &[0xff; procreg::META_MAX]).unwrap();
    assert_eq!(&*reg.lookup(&max).unwrap().unwrap().meta, &[0xff; procreg::META_MAX][..]);
    let err = reg.register("svc.big", &[0; procreg::META_MAX + 1]).unwrap_err();
    assert_eq!(err.errno(), errno::EMSGSIZE);
    // Any bytes but NUL make a name.
    reg.register(&b"caf\xc3\xa9.\xff"[..], b"").unwrap();
    let names: Vec<Vec<u8>> = reg.entries().unwrap().into_iter().map(|e| e.name.into_owned()).collect();
    assert!(names.contains(&b"caf\xc3\xa9.\xff".to_vec()), "{names:?}");
}

#[test]
fn taken_by_another_process_queue_and_death() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    let mut holder = d.holder(&reg, &["run", "svc.held", "--meta", "theirs"], "svc.held");
    let e = reg.lookup("svc.held").unwrap().unwrap();
    assert_eq!((e.pid as u32, &*e.meta), (holder.id(), &b"theirs"[..]));
    let err = reg.register("svc.held", b"mine").unwrap_err();
    assert!(err.is_taken());
    assert_eq!(err.errno(), errno::EEXIST);
    assert_eq!(std::io::Error::from(err).kind(), std::io::ErrorKind::AlreadyExists);
    assert!(!err.to_string().is_empty());
    assert_eq!(reg.unregister("svc.absent").unwrap_err(), Error::NOT_FOUND);
    let queued = reg
        .register_with("svc.held", b"next", &RegisterOptions { flags: procreg::sys::PROCREG_QUEUE, lease_ms: 0 })
        .unwrap();
    assert!(!queued);
    holder.kill().unwrap();
    holder.wait().unwrap();
    reg.sync().unwrap();
    let e = reg.lookup("svc.held").unwrap().unwrap();
    assert_eq!((e.pid, &*e.meta), (my_pid(), &b"next"[..]));
}

#[test]
fn groups() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    let mut holder = d.holder(&reg, &["run", "svc.worker", "--group", "workers", "--meta", "w"], "svc.worker");
    reg.join("workers", b"me").unwrap();
    reg.join("cache", b"").unwrap();
    assert!(reg.wait_group("workers", 2, Some(Duration::from_secs(30))).unwrap());
    assert!(!reg.wait_group("workers", 3, Some(Duration::from_millis(20))).unwrap());
    let mut m: Vec<(i32, Vec<u8>)> =
        reg.members("workers").unwrap().into_iter().map(|e| (e.pid, e.meta.into_owned())).collect();
    m.sort();
    let mut want = vec![(my_pid(), b"me".to_vec()), (holder.id() as i32, b"w".to_vec())];
    want.sort();
    assert_eq!(m, want);
    let mut g: Vec<(Vec<u8>, u64, u64)> =
        reg.groups().unwrap().into_iter().map(|g| (g.name, g.members, g.local_members)).collect();
    g.sort();
    assert_eq!(g, vec![(b"cache".to_vec(), 1, 1), (b"workers".to_vec(), 2, 2)]);
    reg.leave("cache").unwrap();
    assert_eq!(reg.leave("cache").unwrap_err(), Error::NOT_FOUND);
    assert!(reg.members("cache").unwrap().is_empty());
    holder.kill().unwrap();
    holder.wait().unwrap();
    reg.sync().unwrap();
    assert_eq!(reg.members("workers").unwrap().len(), 1);
}

#[test]
fn wait_from_another_thread() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    assert!(!reg.wait("svc.late", Some(Duration::from_millis(20))).unwrap());
    std::thread::scope(|s| {
        let w = s.spawn(|| reg.wait("svc.late", Some(Duration::from_secs(30))));
        std::thread::sleep(Duration::from_millis(50));
        reg.register("svc.late", b"here").unwrap();
        assert!(w.join().unwrap().unwrap());
    });
}

#[test]
fn watch_iterator_and_fd() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    let mut w = reg.watch();
    assert_eq!(w.next_timeout(Some(Duration::ZERO)).unwrap(), None);
    reg.register("svc.w", b"1").unwrap();
    reg.register("svc.w", b"2").unwrap();
    reg.join("g.w", b"").unwrap();
    reg.unregister("svc.w").unwrap();
    let got: Vec<_> = w.by_ref().take(4).map(|e| e.unwrap()).collect();
    let kinds: Vec<_> = got.iter().map(|e| (e.kind, e.name.clone(), e.is_group)).collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Registered, b"svc.w".to_vec(), false),
            (EventKind::Updated, b"svc.w".to_vec(), false),
            (EventKind::Joined, b"g.w".to_vec(), true),
            (EventKind::Unregistered, b"svc.w".to_vec(), false),
        ]
    );
    assert!(got.iter().all(|e| e.pid == my_pid()));
    assert_eq!(w.cursor(), got[3].seq);
    assert_eq!(got[3].seq, got[0].seq + 3);

    // poll(2) on the feed's descriptor.
    #[repr(C)]
    struct PollFd {
        fd: i32,
        events: i16,
        revents: i16,
    }
    extern "C" {
        fn poll(fds: *mut PollFd, n: u64, timeout: i32) -> i32;
    }
    let mut p = PollFd { fd: w.fd().unwrap(), events: 1, revents: 0 };
    w.drain().unwrap();
    reg.register("svc.polled", b"").unwrap();
    assert_eq!(unsafe { poll(&mut p, 1, 30_000) }, 1);
    let evs = w.drain().unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!((evs[0].kind, &evs[0].name[..]), (EventKind::Registered, &b"svc.polled"[..]));
}

#[test]
fn no_such_scope() {
    let d = Daemon::start();
    let err = Registry::open_with(&procreg::Options { scope: Some("nosuch"), dir: Some(&d.dir) }).err().unwrap();
    assert!(err.is_not_found());
}

#[test]
fn lookup_many_matches_lookup() {
    let d = Daemon::start();
    let reg = d.open().unwrap();
    // More than one library call's worth; every third left unregistered.
    let names: Vec<String> = (0..100).map(|i| format!("svc.many.{i:03}")).collect();
    let big = vec![0x5au8; procreg::META_MAX];
    for (i, n) in names.iter().enumerate() {
        let meta: &[u8] = match i % 10 {
            0 => b"",
            1 => &big,
            _ => n.as_bytes(),
        };
        if i % 3 != 2 {
            reg.register(n, meta).unwrap();
        }
    }
    let got = reg.lookup_many(&names).unwrap();
    assert_eq!(got.len(), names.len());
    for (n, e) in names.iter().zip(&got) {
        assert_eq!(e, &reg.lookup(n).unwrap(), "{n}");
    }
    assert_eq!(got.iter().filter(|e| e.is_some()).count(), 67);
    // Byte-string names too, and none at all.
    let raw: [&[u8]; 2] = [b"svc.many.000", b"svc.many.002"];
    let two = reg.lookup_many(&raw).unwrap();
    assert_eq!((two[0].as_ref().map(|e| e.meta.len()), two[1].is_none()), (Some(0), true));
    assert!(reg.lookup_many::<&str>(&[]).unwrap().is_empty());
    let long = "n".repeat(procreg::NAME_MAX + 1);
    for (bad, code) in [("", errno::EINVAL), ("a\0b", errno::EINVAL), (long.as_str(), errno::ENAMETOOLONG)] {
        let mut v: Vec<&str> = names.iter().take(40).map(String::as_str).collect();
        v.push(bad);
        assert_eq!(reg.lookup_many(&v).unwrap_err().errno(), code, "{bad:?}");
    }
}
