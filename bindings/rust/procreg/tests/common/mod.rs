// SPDX-License-Identifier: BSD-2-Clause
//! A private procregd for a test: its own directory and scope, never the
//! host's registry. PROCREG_BUILD_DIR names the build tree whose procregd
//! and procreg (the CLI, for other processes that hold names) run.
#![allow(dead_code)]
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use procreg::{Options, Registry};

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
const SIGTERM: i32 = 15;

pub fn build_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("PROCREG_BUILD_DIR").expect("PROCREG_BUILD_DIR: the build tree with procregd"))
}

pub struct Daemon {
    pub dir: PathBuf,
    pub scope: String,
    child: Child,
}

impl Daemon {
    pub fn start() -> Daemon {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "procreg-rs.{}.{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).unwrap();
        let log = std::fs::File::create(dir.join("procregd.log")).unwrap();
        let child = Command::new(build_dir().join("procregd"))
            .args(["--foreground", "--scope", "cargo", "--dir"])
            .arg(&dir)
            .env_remove("PROCREG_DIR")
            .env_remove("PROCREG_SCOPE")
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("procregd");
        let mut d = Daemon { dir, scope: "cargo".into(), child };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(reg) = d.open() {
                if reg.sync().is_ok() {
                    return d;
                }
            }
            if d.child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                panic!("procregd did not start: {}", d.log());
            }
            sleep(Duration::from_millis(5));
        }
    }

    pub fn open(&self) -> procreg::Result<Registry> {
        Registry::open_with(&Options { scope: Some(&self.scope), dir: Some(&self.dir) })
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("procregd.log")).unwrap_or_default()
    }

    /// A command run with this registry as its environment's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("PROCREG_DIR", &self.dir).env("PROCREG_SCOPE", &self.scope).env("PROCREG_NO_AUTOSTART", "1");
        c
    }

    /// Another process holding NAME (`procreg run NAME -- sleep`), once it does.
    pub fn holder(&self, reg: &Registry, args: &[&str], name: &str) -> Child {
        let child = self
            .command(build_dir().join("procreg"))
            .args(args)
            .args(["--", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        assert!(reg.wait(name, Some(Duration::from_secs(30))).unwrap(), "{args:?} never registered");
        child
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        unsafe { kill(self.child.id() as i32, SIGTERM) };
        let status = self.child.wait().unwrap();
        let log = self.log();
        std::fs::remove_dir_all(&self.dir).unwrap();
        if !std::thread::panicking() {
            assert!(status.success(), "procregd exited {status}:\n{log}");
        }
    }
}
