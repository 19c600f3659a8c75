// SPDX-License-Identifier: BSD-2-Clause
//! procreg, the process registry, from Rust: a safe layer over libprocreg
//! (the `procreg-sys` crate).
//!
//! A [`Registry`] is a handle on one scope's table. Lookups read the shared
//! table through the library's lock-free reader protocol: no system call,
//! no daemon. [`Registry::lookup_in`] copies the metadata into a buffer of
//! the caller's and allocates nothing; [`Registry::lookup`] returns it
//! owned. Writes go to `procregd` through the library and return once the
//! change is published. Every error is an [`Error`] carrying the errno.
//!
//! ```no_run
//! let reg = procreg::Registry::open()?;
//! reg.register("payments", b"unix:/run/payments.sock")?;
//! let e = reg.lookup("payments")?.expect("just registered");
//! assert_eq!(e.pid as u32, std::process::id());
//! # Ok::<(), procreg::Error>(())
//! ```
use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::fmt;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;
use std::ptr::{self, NonNull};
use std::time::{Duration, Instant};

pub use procreg_sys as sys;

/// The longest name, in bytes.
pub const NAME_MAX: usize = sys::PROCREG_NAME_MAX;
/// The most metadata a name or a membership carries, in bytes.
pub const META_MAX: usize = sys::PROCREG_META_MAX;

/// The errno values procreg's calls return (Linux's numbering).
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EINTR: i32 = 4;
    pub const EACCES: i32 = 13;
    pub const EEXIST: i32 = 17;
    pub const EINVAL: i32 = 22;
    pub const ERANGE: i32 = 34;
    pub const ENAMETOOLONG: i32 = 36;
    pub const EOVERFLOW: i32 = 75;
    pub const EMSGSIZE: i32 = 90;
    pub const ECONNRESET: i32 = 104;
    pub const ETIMEDOUT: i32 = 110;
    pub const EINPROGRESS: i32 = 115;
    pub const EDQUOT: i32 = 122;
}

/// An error of libprocreg: its errno (positive), with the library's
/// message. `From<Error> for io::Error` keeps the errno.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Error(i32);

impl Error {
    /// Another process holds the name (EEXIST).
    pub const TAKEN: Error = Error(errno::EEXIST);
    /// No such name, membership or table (ENOENT).
    pub const NOT_FOUND: Error = Error(errno::ENOENT);
    /// Not allowed: another owner's name, an untrusted table (EPERM).
    pub const PERMISSION: Error = Error(errno::EPERM);
    /// A name or metadata that could never be registered (EINVAL).
    pub const INVALID: Error = Error(errno::EINVAL);
    /// A wait timed out (ETIMEDOUT).
    pub const TIMED_OUT: Error = Error(errno::ETIMEDOUT);
    /// The change feed lapped a watch: events were lost (EOVERFLOW).
    pub const OVERFLOW: Error = Error(errno::EOVERFLOW);

    /// From a negative errno, as the library returns it.
    pub fn from_neg(err: c_int) -> Error {
        Error(-err)
    }
    /// The errno, positive.
    pub fn errno(&self) -> i32 {
        self.0
    }
    pub fn is_taken(&self) -> bool {
        *self == Error::TAKEN
    }
    pub fn is_not_found(&self) -> bool {
        *self == Error::NOT_FOUND
    }
    /// The library's message for it.
    pub fn message(&self) -> &'static str {
        // procreg_strerror() returns static strings.
        unsafe { CStr::from_ptr(sys::procreg_strerror(-self.0)) }.to_str().unwrap_or("unknown error")
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "procreg::Error({}: {})", self.0, self.message())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::from_raw_os_error(e.0)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

fn check(err: c_int) -> Result<()> {
    if err < 0 {
        Err(Error::from_neg(err))
    } else {
        Ok(())
    }
}

/// A name as the library takes it: NUL-terminated, on the stack, so that
/// a lookup allocates nothing. The library's own rules, checked before
/// copying: 1..=NAME_MAX bytes, no NUL.
struct CName {
    buf: [u8; NAME_MAX + 1],
}

impl CName {
    #[inline]
    fn new(name: &[u8]) -> Result<CName> {
        if name.is_empty() || name.contains(&0) {
            return Err(Error(errno::EINVAL));
        }
        if name.len() > NAME_MAX {
            return Err(Error(errno::ENAMETOOLONG));
        }
        let mut buf = MaybeUninit::<[u8; NAME_MAX + 1]>::uninit();
        // Only the name and its NUL are written, and only they are read.
        unsafe {
            let p = buf.as_mut_ptr() as *mut u8;
            ptr::copy_nonoverlapping(name.as_ptr(), p, name.len());
            *p.add(name.len()) = 0;
            Ok(CName { buf: buf.assume_init() })
        }
    }
    fn ptr(&self) -> *const c_char {
        self.buf.as_ptr() as *const c_char
    }
}

fn timeout_ms(t: Option<Duration>) -> c_int {
    match t {
        None => -1,
        // Rounded up, so that a wait never ends early.
        Some(d) => d.as_nanos().div_ceil(1_000_000).min(c_int::MAX as u128) as c_int,
    }
}

fn c_bytes(s: &[c_char]) -> Vec<u8> {
    let s: &[u8] = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, s.len()) };
    let n = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    s[..n].to_vec()
}

/// A registered name, or a group membership, copied out of the table.
/// The metadata is borrowed from the caller's buffer
/// ([`Registry::lookup_in`]) or owned ([`Registry::lookup`],
/// [`Registry::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The name (for a membership: the group).
    pub name: Cow<'a, [u8]>,
    /// The owner's pid, on its node.
    pub pid: i32,
    /// The owner's node: 0 for this host.
    pub node: u32,
    /// The owner's uid.
    pub uid: u32,
    /// `sys::PROCREG_ENTRY_*`.
    pub flags: u32,
    /// The owner's start time, in clock ticks since boot.
    pub start_time: u64,
    /// When it was registered: CLOCK_REALTIME, nanoseconds.
    pub registered_ns: u64,
    pub meta: Cow<'a, [u8]>,
}

impl Entry<'_> {
    /// The same entry, owning its name and metadata.
    pub fn into_owned(self) -> Entry<'static> {
        Entry {
            name: Cow::Owned(self.name.into_owned()),
            meta: Cow::Owned(self.meta.into_owned()),
            ..self
        }
    }
}

fn entry_of<'a>(e: &sys::procreg_entry, name: Cow<'a, [u8]>, meta: Cow<'a, [u8]>) -> Entry<'a> {
    Entry {
        name,
        pid: e.pid,
        node: e.node,
        uid: e.uid,
        flags: e.flags,
        start_time: e.start_time,
        registered_ns: e.registered_ns,
        meta,
    }
}

/// A group and its member counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: Vec<u8>,
    pub members: u64,
    pub local_members: u64,
}

/// What an [`Event`] says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Registered,
    Unregistered,
    Updated,
    Joined,
    Left,
    Died,
    Transferred,
    Replaced,
    Expired,
    Refreshed,
    NodeDown,
    Conflict,
    /// A kind a later library added.
    Other(i32),
}

impl EventKind {
    fn from_raw(t: c_int) -> EventKind {
        use EventKind::*;
        match t {
            sys::PROCREG_EV_REGISTERED => Registered,
            sys::PROCREG_EV_UNREGISTERED => Unregistered,
            sys::PROCREG_EV_UPDATED => Updated,
            sys::PROCREG_EV_JOINED => Joined,
            sys::PROCREG_EV_LEFT => Left,
            sys::PROCREG_EV_DIED => Died,
            sys::PROCREG_EV_TRANSFERRED => Transferred,
            sys::PROCREG_EV_REPLACED => Replaced,
            sys::PROCREG_EV_EXPIRED => Expired,
            sys::PROCREG_EV_REFRESHED => Refreshed,
            sys::PROCREG_EV_NODE_DOWN => NodeDown,
            sys::PROCREG_EV_CONFLICT => Conflict,
            t => Other(t),
        }
    }
}

/// A change, from the change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// 1, 2, 3... in the order of the writes.
    pub seq: u64,
    pub time_ns: u64,
    pub kind: EventKind,
    /// `name` is a group.
    pub is_group: bool,
    pub pid: i32,
    pub node: u32,
    pub uid: u32,
    pub start_time: u64,
    pub name: Vec<u8>,
}

/// Where the registry is: a scope and a directory (None: `$PROCREG_SCOPE`
/// and `$PROCREG_DIR`, else "default" and /dev/shm).
#[derive(Debug, Clone, Default)]
pub struct Options<'a> {
    pub scope: Option<&'a str>,
    pub dir: Option<&'a Path>,
}

/// How to register: `sys::PROCREG_QUEUE` and the other flags, a lease.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegisterOptions {
    pub flags: u32,
    pub lease_ms: u32,
}

/// A handle on one scope's registry. It may be shared between threads
/// (`&Registry` is all any call needs); dropping it releases the table's
/// mapping and the connection, while the names stay registered: they
/// belong to the process.
pub struct Registry {
    raw: NonNull<sys::procreg_t>,
}

// The library serialises what the handle's threads share (its
// connection) and gives each reading thread a slot of its own.
unsafe impl Send for Registry {}
unsafe impl Sync for Registry {}

impl Drop for Registry {
    fn drop(&mut self) {
        unsafe { sys::procreg_close(self.raw.as_ptr()) }
    }
}

impl Registry {
    /// The registry of `$PROCREG_SCOPE` in `$PROCREG_DIR` (or the defaults).
    pub fn open() -> Result<Registry> {
        Registry::open_with(&Options::default())
    }

    /// The registry of `opts`: NOT_FOUND if no daemon ever ran for it.
    pub fn open_with(opts: &Options<'_>) -> Result<Registry> {
        let scope = opts.scope.map(|s| CString::new(s).map_err(|_| Error::INVALID)).transpose()?;
        let dir = opts
            .dir
            .map(|d| CString::new(d.as_os_str().as_encoded_bytes()).map_err(|_| Error::INVALID))
            .transpose()?;
        let o = sys::procreg_opts {
            sz: size_of::<sys::procreg_opts>(),
            scope: scope.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            dir: dir.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            socket: ptr::null(),
            trust_uid: 0,
        };
        let raw = unsafe { sys::procreg_open(&o) };
        NonNull::new(raw)
            .map(|raw| Registry { raw })
            .ok_or_else(|| Error(io::Error::last_os_error().raw_os_error().unwrap_or(errno::EINVAL)))
    }

    fn raw(&self) -> *mut sys::procreg_t {
        self.raw.as_ptr()
    }

    #[inline]
    fn lookup_raw(&self, name: &[u8], meta: &mut [u8]) -> Result<Option<sys::procreg_entry>> {
        // SAFETY: initialised bytes are valid MaybeUninit<u8>, and the
        // library writes only bytes.
        let meta = unsafe { &mut *(meta as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.lookup_uninit(name, meta)
    }

    /// lookup_raw into a buffer that need not be initialised: the library
    /// writes the first min(.meta_len, META) bytes of it.
    #[inline]
    fn lookup_uninit(&self, name: &[u8], meta: &mut [MaybeUninit<u8>]) -> Result<Option<sys::procreg_entry>> {
        let cname = CName::new(name)?;
        let mut e = MaybeUninit::<sys::procreg_entry>::uninit();
        // The library reads .sz, .meta and .meta_size, and fills the rest.
        unsafe {
            let p = e.as_mut_ptr();
            ptr::addr_of_mut!((*p).sz).write(size_of::<sys::procreg_entry>());
            ptr::addr_of_mut!((*p).meta).write(meta.as_mut_ptr() as *mut c_void);
            ptr::addr_of_mut!((*p).meta_size).write(meta.len());
            match sys::procreg_lookup(self.raw(), cname.ptr(), p) {
                0 => Ok(Some(e.assume_init())),
                err if err == -errno::ENOENT => Ok(None),
                err => Err(Error::from_neg(err)),
            }
        }
    }

    /// Look NAME up, its metadata copied into BUF: allocates nothing.
    /// `Ok(None)` if it is not registered; ERANGE if BUF is shorter than
    /// the metadata (META_MAX is always enough for a table of this build).
    #[inline]
    pub fn lookup_in<'a, N: AsRef<[u8]> + ?Sized>(&self, name: &'a N, buf: &'a mut [u8]) -> Result<Option<Entry<'a>>> {
        let name = name.as_ref();
        match self.lookup_raw(name, buf)? {
            None => Ok(None),
            Some(e) if e.meta_len > buf.len() => Err(Error(errno::ERANGE)),
            Some(e) => Ok(Some(entry_of(&e, Cow::Borrowed(name), Cow::Borrowed(&buf[..e.meta_len])))),
        }
    }

    /// Look NAME up: its entry with the metadata owned (allocated only if
    /// there is some), or `Ok(None)` if it is not registered.
    pub fn lookup<'n, N: AsRef<[u8]> + ?Sized>(&self, name: &'n N) -> Result<Option<Entry<'n>>> {
        let name = name.as_ref();
        // Not zeroed: clearing 1 KiB was about a tenth of a lookup's time
        // (bench: 82-107 ns to 75-97), and only what the library wrote is
        // read.
        let mut buf = [MaybeUninit::<u8>::uninit(); META_MAX];
        let Some(e) = self.lookup_uninit(name, &mut buf)? else {
            return Ok(None);
        };
        if e.meta_len <= buf.len() {
            // SAFETY: the library wrote these meta_len bytes.
            let meta = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, e.meta_len) };
            return Ok(Some(entry_of(&e, Cow::Borrowed(name), Cow::Owned(meta.to_vec()))));
        }
        // A table made with a larger metadata limit than this build's.
        let mut big = vec![0u8; e.meta_len];
        loop {
            match self.lookup_raw(name, &mut big)? {
                None => return Ok(None),
                Some(e) if e.meta_len > big.len() => big.resize(e.meta_len, 0),
                Some(e) => {
                    big.truncate(e.meta_len);
                    return Ok(Some(entry_of(&e, Cow::Borrowed(name), Cow::Owned(big))));
                }
            }
        }
    }

    /// Look every name of NAMES up in one call of the library
    /// (`procreg_lookup_many`), which overlaps their memory accesses: the
    /// entries in the order of NAMES, `None` for a name not registered.
    /// A name that could never be registered fails the whole call. Each
    /// entry owns its metadata (allocated only if there is some).
    pub fn lookup_many<'n, N: AsRef<[u8]>>(&self, names: &'n [N]) -> Result<Vec<Option<Entry<'n>>>> {
        const MANY: usize = 32;
        let mut out = Vec::with_capacity(names.len());
        if names.is_empty() {
            return Ok(out);
        }
        // Room for every name's metadata of one call, reused by the next;
        // not zeroed (32 KiB a call would cost as much as the lookups):
        // only the bytes the library wrote are read.
        let mut meta = Vec::<u8>::with_capacity(MANY.min(names.len()) * META_MAX);
        let base = meta.spare_capacity_mut().as_mut_ptr() as *mut u8;
        for chunk in names.chunks(MANY) {
            let mut cnames: [MaybeUninit<CName>; MANY] = [const { MaybeUninit::uninit() }; MANY];
            let mut ptrs = [ptr::null::<c_char>(); MANY];
            let mut res = [0 as c_int; MANY];
            let mut es: [MaybeUninit<sys::procreg_entry>; MANY] = [const { MaybeUninit::uninit() }; MANY];
            for (i, n) in chunk.iter().enumerate() {
                let c = cnames[i].write(CName::new(n.as_ref())?);
                ptrs[i] = c.ptr();
                // As in lookup_raw: the library reads these three and
                // fills the rest.
                let p = es[i].as_mut_ptr();
                unsafe {
                    ptr::addr_of_mut!((*p).sz).write(size_of::<sys::procreg_entry>());
                    ptr::addr_of_mut!((*p).meta).write(base.add(i * META_MAX) as *mut c_void);
                    ptr::addr_of_mut!((*p).meta_size).write(META_MAX);
                }
            }
            let err = unsafe {
                sys::procreg_lookup_many(
                    self.raw(),
                    ptrs.as_ptr(),
                    chunk.len(),
                    es.as_mut_ptr() as *mut sys::procreg_entry,
                    res.as_mut_ptr(),
                )
            };
            check(err)?;
            for (i, n) in chunk.iter().enumerate() {
                let name = n.as_ref();
                match res[i] {
                    0 => {}
                    err if err == -errno::ENOENT => {
                        out.push(None);
                        continue;
                    }
                    err => return Err(Error::from_neg(err)),
                }
                let e = unsafe { es[i].assume_init_ref() };
                if e.meta_len > META_MAX {
                    // A table with a larger metadata limit than this
                    // build's: this one on its own.
                    out.push(self.lookup(name)?);
                    continue;
                }
                let m = unsafe { std::slice::from_raw_parts(base.add(i * META_MAX), e.meta_len) };
                out.push(Some(entry_of(e, Cow::Borrowed(name), Cow::Owned(m.to_vec()))));
            }
        }
        Ok(out)
    }

    /// Whether NAME is registered.
    pub fn contains<N: AsRef<[u8]> + ?Sized>(&self, name: &N) -> Result<bool> {
        let cname = CName::new(name.as_ref())?;
        match unsafe { sys::procreg_lookup(self.raw(), cname.ptr(), ptr::null_mut()) } {
            0 => Ok(true),
            err if err == -errno::ENOENT => Ok(false),
            err => Err(Error::from_neg(err)),
        }
    }

    /// Register NAME for this process (again: replace its metadata).
    /// TAKEN if another process holds it.
    pub fn register<N: AsRef<[u8]> + ?Sized>(&self, name: &N, meta: &[u8]) -> Result<()> {
        let cname = CName::new(name.as_ref())?;
        check(unsafe { sys::procreg_register(self.raw(), cname.ptr(), meta.as_ptr() as *const c_void, meta.len()) })
    }

    /// Register with options: `Ok(true)` once NAME is ours, `Ok(false)` if
    /// `sys::PROCREG_QUEUE` put us in line behind its owner.
    pub fn register_with<N: AsRef<[u8]> + ?Sized>(&self, name: &N, meta: &[u8], opts: &RegisterOptions) -> Result<bool> {
        let cname = CName::new(name.as_ref())?;
        let o = sys::procreg_register_opts {
            sz: size_of::<sys::procreg_register_opts>(),
            flags: opts.flags,
            lease_ms: opts.lease_ms,
            lost_signal: 0,
            pidfd: -1,
        };
        match unsafe {
            sys::procreg_register_opts(self.raw(), cname.ptr(), meta.as_ptr() as *const c_void, meta.len(), &o)
        } {
            0 => Ok(true),
            err if err == -errno::EINPROGRESS => Ok(false),
            err => Err(Error::from_neg(err)),
        }
    }

    fn name_call<N: AsRef<[u8]> + ?Sized>(
        &self,
        name: &N,
        f: unsafe extern "C" fn(*mut sys::procreg_t, *const c_char) -> c_int,
    ) -> Result<()> {
        let cname = CName::new(name.as_ref())?;
        check(unsafe { f(self.raw(), cname.ptr()) })
    }

    /// Remove NAME: NOT_FOUND if it is not registered.
    pub fn unregister<N: AsRef<[u8]> + ?Sized>(&self, name: &N) -> Result<()> {
        self.name_call(name, sys::procreg_unregister)
    }

    /// Renew NAME's lease (and our leased membership of group NAME).
    pub fn refresh<N: AsRef<[u8]> + ?Sized>(&self, name: &N) -> Result<()> {
        self.name_call(name, sys::procreg_refresh)
    }

    /// Join GROUP (again: replace the membership's metadata).
    pub fn join<N: AsRef<[u8]> + ?Sized>(&self, group: &N, meta: &[u8]) -> Result<()> {
        let cname = CName::new(group.as_ref())?;
        check(unsafe { sys::procreg_join(self.raw(), cname.ptr(), meta.as_ptr() as *const c_void, meta.len()) })
    }

    /// Leave GROUP: NOT_FOUND if not a member.
    pub fn leave<N: AsRef<[u8]> + ?Sized>(&self, group: &N) -> Result<()> {
        self.name_call(group, sys::procreg_leave)
    }

    /// The members of GROUP (empty if it has none).
    pub fn members<N: AsRef<[u8]> + ?Sized>(&self, group: &N) -> Result<Vec<Entry<'static>>> {
        let cname = CName::new(group.as_ref())?;
        let mut out: Vec<Entry<'static>> = Vec::new();
        check(unsafe { sys::procreg_members(self.raw(), cname.ptr(), collect_entry, &mut out as *mut _ as *mut c_void) })?;
        Ok(out)
    }

    /// Every registered name.
    pub fn entries(&self) -> Result<Vec<Entry<'static>>> {
        let mut out: Vec<Entry<'static>> = Vec::new();
        check(unsafe { sys::procreg_foreach(self.raw(), collect_entry, &mut out as *mut _ as *mut c_void) })?;
        Ok(out)
    }

    /// Every group, with its member counts.
    pub fn groups(&self) -> Result<Vec<Group>> {
        let mut out: Vec<Group> = Vec::new();
        check(unsafe { sys::procreg_groups(self.raw(), collect_group, &mut out as *mut _ as *mut c_void) })?;
        Ok(out)
    }

    /// Block until NAME is registered: `Ok(true)`, or `Ok(false)` after
    /// TIMEOUT (None: no limit).
    pub fn wait<N: AsRef<[u8]> + ?Sized>(&self, name: &N, timeout: Option<Duration>) -> Result<bool> {
        let cname = CName::new(name.as_ref())?;
        retry_wait(timeout, |ms| unsafe { sys::procreg_wait(self.raw(), cname.ptr(), ms) })
    }

    /// Block until GROUP has at least COUNT members.
    pub fn wait_group<N: AsRef<[u8]> + ?Sized>(&self, group: &N, count: u64, timeout: Option<Duration>) -> Result<bool> {
        let cname = CName::new(group.as_ref())?;
        retry_wait(timeout, |ms| unsafe { sys::procreg_wait_group(self.raw(), cname.ptr(), count, ms) })
    }

    /// Return once the daemon has processed every request and every process
    /// death that happened before the call.
    pub fn sync(&self) -> Result<()> {
        check(unsafe { sys::procreg_sync(self.raw()) })
    }

    /// Counters from the table's header.
    pub fn stats(&self) -> Result<sys::procreg_stats> {
        let mut st = sys::procreg_stats { sz: size_of::<sys::procreg_stats>(), ..Default::default() };
        check(unsafe { sys::procreg_stats(self.raw(), &mut st) })?;
        Ok(st)
    }

    /// Follow the change feed from now on.
    pub fn watch(&self) -> Watch<'_> {
        Watch { reg: self, cursor: unsafe { sys::procreg_feed_head(self.raw()) }, fd: None }
    }
}

/// A wait of the library, again after a signal (-EINTR) for what is left
/// of the timeout: `Ok(true)` when met, `Ok(false)` on timeout.
fn retry_wait(timeout: Option<Duration>, mut f: impl FnMut(c_int) -> c_int) -> Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut left = timeout;
    loop {
        match f(timeout_ms(left)) {
            0 => return Ok(true),
            err if err == -errno::ETIMEDOUT => return Ok(false),
            err if err == -errno::EINTR => {
                left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            }
            err => return Err(Error::from_neg(err)),
        }
    }
}

unsafe extern "C" fn collect_entry(e: *const sys::procreg_entry, arg: *mut c_void) -> c_int {
    let out = &mut *(arg as *mut Vec<Entry<'static>>);
    let e = &*e;
    let meta = if e.meta.is_null() || e.meta_len == 0 {
        Vec::new()
    } else {
        std::slice::from_raw_parts(e.meta as *const u8, e.meta_len).to_vec()
    };
    out.push(entry_of(e, Cow::Owned(c_bytes(&e.name)), Cow::Owned(meta)));
    0
}

unsafe extern "C" fn collect_group(g: *const sys::procreg_group, arg: *mut c_void) -> c_int {
    let out = &mut *(arg as *mut Vec<Group>);
    let g = &*g;
    out.push(Group { name: c_bytes(&g.name), members: g.members, local_members: g.local_members });
    0
}

/// The change feed, from [`Registry::watch`]: an iterator of events that
/// blocks for each, or [`Watch::fd`] and [`Watch::drain`] for a poll(2)
/// or epoll loop. An item `Err(Error::OVERFLOW)` says the feed lapped
/// the watch (events were lost: read the table again); iteration goes on
/// from the oldest event left.
pub struct Watch<'r> {
    reg: &'r Registry,
    cursor: u64,
    fd: Option<OwnedFd>,
}

impl Watch<'_> {
    /// The next event: `Ok(None)` if none came within TIMEOUT (None: no
    /// limit).
    pub fn next_timeout(&mut self, timeout: Option<Duration>) -> Result<Option<Event>> {
        let mut ev = MaybeUninit::<sys::procreg_event>::zeroed();
        unsafe { ptr::addr_of_mut!((*ev.as_mut_ptr()).sz).write(size_of::<sys::procreg_event>()) };
        let raw = self.reg.raw();
        let cursor: *mut u64 = &mut self.cursor;
        let got = retry_wait(timeout, |ms| unsafe { sys::procreg_next_event(raw, cursor, ev.as_mut_ptr(), ms) })?;
        if !got {
            return Ok(None);
        }
        let ev = unsafe { ev.assume_init() };
        Ok(Some(Event {
            seq: ev.seq,
            time_ns: ev.time_ns,
            kind: EventKind::from_raw(ev.type_),
            is_group: ev.is_group != 0,
            pid: ev.pid,
            node: ev.node,
            uid: ev.uid,
            start_time: ev.start_time,
            name: c_bytes(&ev.name),
        }))
    }

    /// The sequence number of the last event read.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// A descriptor that turns readable when events come (made on the
    /// first call; the watch closes it): poll it, then [`Watch::drain`].
    pub fn fd(&mut self) -> Result<RawFd> {
        if self.fd.is_none() {
            let fd = unsafe { sys::procreg_feed_fd(self.reg.raw()) };
            check(fd)?;
            self.fd = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        Ok(self.fd.as_ref().unwrap().as_raw_fd())
    }

    /// Clear the descriptor's readiness, then return the events there
    /// are, without waiting: an event published meanwhile leaves the
    /// descriptor readable, so none is missed.
    pub fn drain(&mut self) -> Result<Vec<Event>> {
        if let Some(fd) = &self.fd {
            match unsafe { sys::procreg_feed_fd_clear(fd.as_raw_fd()) } {
                0 => {}
                // The daemon went away: the next fd() makes another
                // connection once it is back.
                err if err == -errno::ECONNRESET => self.fd = None,
                err => return Err(Error::from_neg(err)),
            }
        }
        let mut out = Vec::new();
        while let Some(ev) = self.next_timeout(Some(Duration::ZERO))? {
            out.push(ev);
        }
        Ok(out)
    }
}

impl Iterator for Watch<'_> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        self.next_timeout(None).transpose()
    }
}

/// The version of the libprocreg loaded.
pub fn version() -> &'static str {
    unsafe { CStr::from_ptr(sys::procreg_version()) }.to_str().unwrap_or("")
}
