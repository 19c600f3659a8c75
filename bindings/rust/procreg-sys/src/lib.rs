// SPDX-License-Identifier: BSD-2-Clause
//! The FFI declarations of libprocreg (`include/procreg.h`), by hand and
//! std-only: the core API (handles, names, groups, the change feed, lost
//! names, batches, stats). The introspection calls whose structs are not
//! declared here (table info, readers, check, bridge) are left out.
//!
//! Every struct starts with `sz`, which the caller sets to
//! `size_of::<Struct>()` (what `PROCREG_OPTS()` does in C); the tests
//! compare each struct's size and offsets with the C compiler's (see
//! build.rs). Functions return 0 or a negative errno; `procreg_open`
//! returns NULL and sets errno.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

pub const PROCREG_NAME_MAX: usize = 255;
pub const PROCREG_META_MAX: usize = 1024;

pub const PROCREG_PIDFD: c_uint = 0x1;
pub const PROCREG_QUEUE: c_uint = 0x2;
pub const PROCREG_REPLACE: c_uint = 0x4;
pub const PROCREG_REPLACEABLE: c_uint = 0x8;
pub const PROCREG_LEASE_MARK: c_uint = 0x10;

pub const PROCREG_ENTRY_REPLACEABLE: u32 = 0x1;
pub const PROCREG_ENTRY_LEASED: u32 = 0x2;
pub const PROCREG_ENTRY_UNHEALTHY: u32 = 0x4;

pub const PROCREG_OP_REGISTER: c_int = 1;
pub const PROCREG_OP_UNREGISTER: c_int = 2;
pub const PROCREG_OP_JOIN: c_int = 3;
pub const PROCREG_OP_LEAVE: c_int = 4;

pub const PROCREG_EV_REGISTERED: c_int = 1;
pub const PROCREG_EV_UNREGISTERED: c_int = 2;
pub const PROCREG_EV_UPDATED: c_int = 3;
pub const PROCREG_EV_JOINED: c_int = 4;
pub const PROCREG_EV_LEFT: c_int = 5;
pub const PROCREG_EV_DIED: c_int = 6;
pub const PROCREG_EV_TRANSFERRED: c_int = 7;
pub const PROCREG_EV_REPLACED: c_int = 8;
pub const PROCREG_EV_EXPIRED: c_int = 9;
pub const PROCREG_EV_REFRESHED: c_int = 10;
pub const PROCREG_EV_NODE_DOWN: c_int = 11;
pub const PROCREG_EV_CONFLICT: c_int = 12;

pub const PROCREG_LOST_CONFLICT: c_int = 1;

pub type pid_t = i32;

/// The opaque handle.
#[repr(C)]
pub struct procreg_t {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct procreg_opts {
    pub sz: usize,
    pub scope: *const c_char,
    pub dir: *const c_char,
    pub socket: *const c_char,
    pub trust_uid: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct procreg_register_opts {
    pub sz: usize,
    pub flags: c_uint,
    pub lease_ms: u32,
    pub lost_signal: c_int,
    pub pidfd: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct procreg_entry {
    pub sz: usize,
    pub meta: *mut c_void,
    pub meta_size: usize,
    pub meta_len: usize,
    pub pid: pid_t,
    pub node: u32,
    pub flags: u32,
    pub uid: u32,
    pub start_time: u64,
    pub registered_ns: u64,
    pub name: [c_char; PROCREG_NAME_MAX + 1],
}

pub type procreg_entry_cb = unsafe extern "C" fn(e: *const procreg_entry, arg: *mut c_void) -> c_int;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct procreg_op {
    pub sz: usize,
    pub kind: c_int,
    pub name: *const c_char,
    pub meta: *const c_void,
    pub meta_len: usize,
    pub flags: c_uint,
    pub lease_ms: u32,
    pub lost_signal: c_int,
    pub pidfd: c_int,
    pub result: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct procreg_join_opts {
    pub sz: usize,
    pub flags: c_uint,
    pub pidfd: c_int,
    pub lease_ms: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct procreg_group {
    pub sz: usize,
    pub name: [c_char; PROCREG_NAME_MAX + 1],
    pub members: u64,
    pub local_members: u64,
}

pub type procreg_group_cb = unsafe extern "C" fn(g: *const procreg_group, arg: *mut c_void) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct procreg_event {
    pub sz: usize,
    pub seq: u64,
    pub time_ns: u64,
    pub type_: c_int,
    pub is_group: c_int,
    pub pid: pid_t,
    pub node: u32,
    pub uid: u32,
    pub start_time: u64,
    pub name: [c_char; PROCREG_NAME_MAX + 1],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct procreg_lost {
    pub sz: usize,
    pub reason: c_int,
    pub winner_pid: pid_t,
    pub time_ns: u64,
    pub name: [c_char; PROCREG_NAME_MAX + 1],
    pub node: [c_char; 64],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct procreg_stats {
    pub sz: usize,
    pub names: u64,
    pub groups: u64,
    pub memberships: u64,
    pub joins: u64,
    pub leaves: u64,
    pub processes: u64,
    pub arena_size: u64,
    pub arena_used: u64,
    pub arena_top: u64,
    pub index_capacity: u64,
    pub grace_periods: u64,
    pub registrations: u64,
    pub unregistrations: u64,
    pub deaths: u64,
    pub reader_slots: u64,
    pub reader_slots_used: u64,
    pub daemon_pid: pid_t,
    pub daemon_started_ns: u64,
}

extern "C" {
    pub fn procreg_version() -> *const c_char;
    pub fn procreg_open(opts: *const procreg_opts) -> *mut procreg_t;
    pub fn procreg_close(reg: *mut procreg_t);
    pub fn procreg_register(reg: *mut procreg_t, name: *const c_char, meta: *const c_void, meta_len: usize) -> c_int;
    pub fn procreg_register_opts(
        reg: *mut procreg_t,
        name: *const c_char,
        meta: *const c_void,
        meta_len: usize,
        opts: *const procreg_register_opts,
    ) -> c_int;
    pub fn procreg_refresh(reg: *mut procreg_t, name: *const c_char) -> c_int;
    pub fn procreg_wait_owner(reg: *mut procreg_t, name: *const c_char, timeout_ms: c_int) -> c_int;
    pub fn procreg_register_pidfd(
        reg: *mut procreg_t,
        pidfd: c_int,
        name: *const c_char,
        meta: *const c_void,
        meta_len: usize,
    ) -> c_int;
    pub fn procreg_unregister(reg: *mut procreg_t, name: *const c_char) -> c_int;
    pub fn procreg_lookup(reg: *mut procreg_t, name: *const c_char, out: *mut procreg_entry) -> c_int;
    pub fn procreg_lookup_many(
        reg: *mut procreg_t,
        names: *const *const c_char,
        n: usize,
        out: *mut procreg_entry,
        res: *mut c_int,
    ) -> c_int;
    pub fn procreg_foreach(reg: *mut procreg_t, cb: procreg_entry_cb, arg: *mut c_void) -> c_int;
    pub fn procreg_batch(reg: *mut procreg_t, ops: *mut procreg_op, n: usize) -> c_int;
    pub fn procreg_join(reg: *mut procreg_t, group: *const c_char, meta: *const c_void, meta_len: usize) -> c_int;
    pub fn procreg_join_opts(
        reg: *mut procreg_t,
        group: *const c_char,
        meta: *const c_void,
        meta_len: usize,
        opts: *const procreg_join_opts,
    ) -> c_int;
    pub fn procreg_join_pidfd(
        reg: *mut procreg_t,
        pidfd: c_int,
        group: *const c_char,
        meta: *const c_void,
        meta_len: usize,
    ) -> c_int;
    pub fn procreg_leave(reg: *mut procreg_t, group: *const c_char) -> c_int;
    pub fn procreg_members(reg: *mut procreg_t, group: *const c_char, cb: procreg_entry_cb, arg: *mut c_void) -> c_int;
    pub fn procreg_group_count(
        reg: *mut procreg_t,
        group: *const c_char,
        members: *mut u64,
        local_members: *mut u64,
    ) -> c_int;
    pub fn procreg_groups(reg: *mut procreg_t, cb: procreg_group_cb, arg: *mut c_void) -> c_int;
    pub fn procreg_feed_head(reg: *mut procreg_t) -> u64;
    pub fn procreg_next_event(reg: *mut procreg_t, cursor: *mut u64, ev: *mut procreg_event, timeout_ms: c_int) -> c_int;
    pub fn procreg_feed_fd(reg: *mut procreg_t) -> c_int;
    pub fn procreg_feed_fd_clear(fd: c_int) -> c_int;
    pub fn procreg_wait(reg: *mut procreg_t, name: *const c_char, timeout_ms: c_int) -> c_int;
    pub fn procreg_wait_group(reg: *mut procreg_t, group: *const c_char, count: u64, timeout_ms: c_int) -> c_int;
    pub fn procreg_lost(reg: *mut procreg_t, out: *mut procreg_lost, timeout_ms: c_int) -> c_int;
    pub fn procreg_lost_fd(reg: *mut procreg_t) -> c_int;
    pub fn procreg_sync(reg: *mut procreg_t) -> c_int;
    pub fn procreg_stats(reg: *mut procreg_t, out: *mut procreg_stats) -> c_int;
    pub fn procreg_table_path(reg: *const procreg_t) -> *const c_char;
    pub fn procreg_socket_path(reg: *const procreg_t) -> *const c_char;
    pub fn procreg_strerror(err: c_int) -> *const c_char;
    pub fn procreg_name_hash(reg: *mut procreg_t, name: *const c_char, hash: *mut u64) -> c_int;
    pub fn procreg_node_name(reg: *mut procreg_t, id: u32, buf: *mut c_char, len: usize) -> c_int;
}

#[cfg(test)]
mod layout {
    #![allow(non_upper_case_globals, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/layout.rs"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    macro_rules! same_layout {
        ($s:ident { $($m:ident),* }) => {{
            assert_eq!(size_of::<$s>(), layout::$s, "sizeof(struct {})", stringify!($s));
            $(assert_eq!(
                offset_of!($s, $m),
                layout_offset(stringify!($s), stringify!($m).trim_end_matches('_')),
                "offsetof(struct {}, {})",
                stringify!($s),
                stringify!($m)
            );)*
        }};
    }

    fn layout_offset(s: &str, m: &str) -> usize {
        let text = include_str!(concat!(env!("OUT_DIR"), "/layout.rs"));
        let key = format!("pub const {s}__{m}: usize = ");
        let line = text.lines().find(|l| l.starts_with(&key)).unwrap_or_else(|| panic!("the probe has no {s}.{m}"));
        line[key.len()..].trim_end_matches(';').parse().unwrap()
    }

    #[test]
    fn structs_match_the_header() {
        same_layout!(procreg_opts { sz, scope, dir, socket, trust_uid });
        same_layout!(procreg_register_opts { sz, flags, lease_ms, lost_signal, pidfd });
        same_layout!(procreg_entry { sz, meta, meta_size, meta_len, pid, node, flags, uid, start_time, registered_ns, name });
        same_layout!(procreg_op { sz, kind, name, meta, meta_len, flags, lease_ms, lost_signal, pidfd, result });
        same_layout!(procreg_join_opts { sz, flags, pidfd, lease_ms });
        same_layout!(procreg_group { sz, name, members, local_members });
        same_layout!(procreg_event { sz, seq, time_ns, type_, is_group, pid, node, uid, start_time, name });
        same_layout!(procreg_lost { sz, reason, winner_pid, time_ns, name, node });
        same_layout!(procreg_stats { sz, names, groups, memberships, joins, leaves, processes, arena_size, arena_used,
            arena_top, index_capacity, grace_periods, registrations, unregistrations, deaths, reader_slots,
            reader_slots_used, daemon_pid, daemon_started_ns });
    }

    #[test]
    fn the_library_links() {
        let v = unsafe { std::ffi::CStr::from_ptr(procreg_version()) };
        assert!(v.to_str().unwrap().starts_with("0."));
        let msg = unsafe { std::ffi::CStr::from_ptr(procreg_strerror(-17)) };
        assert!(!msg.to_bytes().is_empty());
    }
}
