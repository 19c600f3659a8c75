// SPDX-License-Identifier: BSD-2-Clause

// Package procreg is procreg, the process registry, from Go: a cgo
// binding of libprocreg.
//
// Lookups read the shared table through the library's lock-free reader
// protocol: no system call, no daemon. Writes go to procregd through the
// library and return once the change is published. Errors are *Error,
// which carry the errno: errors.Is(err, procreg.ErrTaken) and the like.
//
// The C side of each call is a small helper in this file's preamble that
// takes Go strings as they are (_GoString_) and returns its result by
// value: a Go pointer handed to C escapes to the heap, so a lookup that
// passed one would allocate on every call. A lookup allocates only the
// metadata slice of the Entry it returns; LookupInto, which fills an
// Entry of the caller's and reuses its Meta, allocates nothing on a hit.
package procreg

/*
// -O2 here, after $CGO_CFLAGS: setting CGO_CFLAGS (as to point at a build
// tree) drops go's default "-g -O2", and these helpers, on every lookup's
// path, would be compiled unoptimised.
#cgo CFLAGS: -O2
#cgo LDFLAGS: -lprocreg
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <procreg.h>

// Metadata up to this size comes back inline with a lookup's result;
// longer is fetched again into a buffer of the right size.
#define GO_META_INLINE 64

struct go_entry {
	int err;
	pid_t pid;
	uint32_t node, uid, flags;
	uint64_t start_time, registered_ns;
	size_t meta_len;
	char meta[GO_META_INLINE];
};

// NAME as a C string in BUF, under the library's rules (1..NAME_MAX
// bytes, no NUL): 0 or a negative errno.
static inline int go_name(_GoString_ s, char *buf)
{
	size_t n = _GoStringLen(s);

	if (n == 0)
		return -EINVAL;
	if (n > PROCREG_NAME_MAX)
		return -ENAMETOOLONG;
	memcpy(buf, _GoStringPtr(s), n);
	buf[n] = 0;
	return memchr(buf, 0, n) ? -EINVAL : 0;
}

static inline struct go_entry go_lookup(uintptr_t reg, _GoString_ name, void *big, size_t big_size)
{
	struct go_entry r;
	// Not PROCREG_OPTS(): on the hit path, zeroing the ~300 bytes
	// that the library fills anyway is wasted.
	struct procreg_entry e;
	char buf[PROCREG_NAME_MAX + 1];

	e.sz = sizeof(e);
	e.meta = big ? big : r.meta;
	e.meta_size = big ? big_size : sizeof(r.meta);

	r.err = go_name(name, buf);
	if (!r.err)
		r.err = procreg_lookup((procreg_t *)reg, buf, &e);
	if (r.err)
		return r;
	r.pid = e.pid;
	r.node = e.node;
	r.uid = e.uid;
	r.flags = e.flags;
	r.start_time = e.start_time;
	r.registered_ns = e.registered_ns;
	r.meta_len = e.meta_len;
	return r;
}

// Names looked up per procreg_lookup_many() call: its entries live on this
// (C) stack.
#define GO_MANY 32

// N names, NUL-terminated one after the other in NAMES, into OUT[0..N):
// the number found or a negative errno. Both buffers are Go memory without
// pointers, kept by no one after the call.
static int go_lookup_many(uintptr_t reg, const char *names, size_t n, struct go_entry *out)
{
	const char *p[GO_MANY];
	struct procreg_entry e[GO_MANY];
	int res[GO_MANY], found = 0;

	for (size_t base = 0; base < n; base += GO_MANY) {
		size_t m = n - base < GO_MANY ? n - base : GO_MANY;
		int k;

		for (size_t i = 0; i < m; i++) {
			p[i] = names;
			names += strlen(names) + 1;
			e[i].sz = sizeof(e[i]);
			e[i].meta = out[base + i].meta;
			e[i].meta_size = sizeof(out[base + i].meta);
		}
		k = procreg_lookup_many((procreg_t *)reg, p, m, e, res);
		if (k < 0)
			return k;
		found += k;
		for (size_t i = 0; i < m; i++) {
			struct go_entry *r = &out[base + i];

			r->err = res[i];
			if (res[i])
				continue;
			r->pid = e[i].pid;
			r->node = e[i].node;
			r->uid = e[i].uid;
			r->flags = e[i].flags;
			r->start_time = e[i].start_time;
			r->registered_ns = e[i].registered_ns;
			r->meta_len = e[i].meta_len;
		}
	}
	return found;
}

static inline int go_contains(uintptr_t reg, _GoString_ name)
{
	char buf[PROCREG_NAME_MAX + 1];
	int err = go_name(name, buf);

	return err ? err : procreg_lookup((procreg_t *)reg, buf, NULL);
}

enum { GO_REGISTER, GO_UNREGISTER, GO_REFRESH, GO_JOIN, GO_LEAVE, GO_WAIT, GO_WAIT_GROUP };

// Every call on one name, by OP: the writes, and the waits.
static int go_call(procreg_t *reg, int op, _GoString_ name, const void *meta, size_t meta_len,
		   unsigned int flags, uint32_t lease_ms, uint64_t count, int timeout_ms)
{
	PROCREG_OPTS(procreg_register_opts, ro, .flags = flags, .lease_ms = lease_ms);
	PROCREG_OPTS(procreg_join_opts, jo, .lease_ms = lease_ms);
	char buf[PROCREG_NAME_MAX + 1];
	int err = go_name(name, buf);

	if (err)
		return err;
	switch (op) {
	case GO_REGISTER:
		return procreg_register_opts(reg, buf, meta, meta_len, &ro);
	case GO_UNREGISTER:
		return procreg_unregister(reg, buf);
	case GO_REFRESH:
		return procreg_refresh(reg, buf);
	case GO_JOIN:
		return procreg_join_opts(reg, buf, meta, meta_len, &jo);
	case GO_LEAVE:
		return procreg_leave(reg, buf);
	case GO_WAIT:
		return procreg_wait(reg, buf, timeout_ms);
	case GO_WAIT_GROUP:
		return procreg_wait_group(reg, buf, count, timeout_ms);
	}
	return -EINVAL;
}

// Walks (members, every name, groups) collect into malloc'd arrays here,
// so that no Go callback is needed: the Go side converts and frees them.
struct go_item {
	struct procreg_entry e; // .meta: malloc'd copy (or NULL)
	struct procreg_group g;
};

struct go_list {
	struct go_item *items;
	size_t n, cap;
	int oom;
};

static struct go_item *go_push(struct go_list *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct go_item *items = realloc(l->items, cap * sizeof(*items));

		if (!items) {
			l->oom = 1;
			return NULL;
		}
		l->items = items;
		l->cap = cap;
	}
	return &l->items[l->n++];
}

static int go_collect_entry(const struct procreg_entry *e, void *arg)
{
	struct go_list *l = arg;
	struct go_item *it = go_push(l);
	void *meta = NULL;

	if (!it)
		return 1;
	if (e->meta_len && !(meta = malloc(e->meta_len))) {
		l->n--;
		l->oom = 1;
		return 1;
	}
	if (meta)
		memcpy(meta, e->meta, e->meta_len);
	memset(it, 0, sizeof(*it));
	memcpy(&it->e, e, e->sz < sizeof(it->e) ? e->sz : sizeof(it->e));
	it->e.meta = meta;
	return 0;
}

static int go_collect_group(const struct procreg_group *g, void *arg)
{
	struct go_list *l = arg;
	struct go_item *it = go_push(l);

	if (!it)
		return 1;
	memset(it, 0, sizeof(*it));
	memcpy(&it->g, g, g->sz < sizeof(it->g) ? g->sz : sizeof(it->g));
	return 0;
}

enum { GO_MEMBERS, GO_ENTRIES, GO_GROUPS };

static int go_walk(procreg_t *reg, int what, _GoString_ name, struct go_list *l)
{
	char buf[PROCREG_NAME_MAX + 1];
	int err = 0;

	memset(l, 0, sizeof(*l));
	if (what == GO_MEMBERS) {
		err = go_name(name, buf);
		if (!err)
			err = procreg_members(reg, buf, go_collect_entry, l);
	} else if (what == GO_ENTRIES) {
		err = procreg_foreach(reg, go_collect_entry, l);
	} else {
		err = procreg_groups(reg, go_collect_group, l);
	}
	return l->oom ? -ENOMEM : err;
}

static void go_list_free(struct go_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->items[i].e.meta);
	free(l->items);
}

struct go_event {
	int err;
	uint64_t cursor;
	struct procreg_event ev;
};

static struct go_event go_next_event(procreg_t *reg, uint64_t cursor, int timeout_ms)
{
	struct go_event r = { .cursor = cursor };

	r.ev.sz = sizeof(r.ev);
	r.err = procreg_next_event(reg, &r.cursor, &r.ev, timeout_ms);
	return r;
}

static procreg_t *go_open(const char *scope, const char *dir, int *err)
{
	PROCREG_OPTS(procreg_opts, o, .scope = scope, .dir = dir);
	procreg_t *reg = procreg_open(&o);

	*err = reg ? 0 : -errno;
	return reg;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The longest name and the most metadata, in bytes.
const (
	NameMax = C.PROCREG_NAME_MAX
	MetaMax = C.PROCREG_META_MAX
)

// Entry flags.
const (
	EntryReplaceable = C.PROCREG_ENTRY_REPLACEABLE
	EntryLeased      = C.PROCREG_ENTRY_LEASED
	EntryUnhealthy   = C.PROCREG_ENTRY_UNHEALTHY
)

// The inline buffer's size, for the tests, which cannot use cgo.
const metaInline = C.GO_META_INLINE

// The errors, comparable with errors.Is (an *Error unwraps to its errno,
// which also matches io/fs's ErrExist, ErrNotExist, ErrPermission).
var (
	ErrTaken       error = syscall.EEXIST       // another process holds the name
	ErrNotFound    error = syscall.ENOENT       // no such name, membership or table
	ErrPermission  error = syscall.EPERM        // not the owner's; an untrusted table
	ErrInvalid     error = syscall.EINVAL       // a name that could never be registered
	ErrNameTooLong error = syscall.ENAMETOOLONG // a name over NameMax bytes
	ErrTooBig      error = syscall.EMSGSIZE     // metadata over MetaMax bytes
	ErrTimeout     error = syscall.ETIMEDOUT
	ErrOverflow    error = syscall.EOVERFLOW // the change feed lapped a watcher
	ErrQuota       error = syscall.EDQUOT
	ErrClosed            = errors.New("procreg: registry closed")
)

// Error is a failed call: what it was, on which name, and the errno.
type Error struct {
	Op    string
	Name  string
	Errno syscall.Errno
}

func (e *Error) Error() string {
	msg := C.GoString(C.procreg_strerror(-C.int(e.Errno)))
	if e.Name == "" {
		return fmt.Sprintf("procreg: %s: %s", e.Op, msg)
	}
	return fmt.Sprintf("procreg: %s %q: %s", e.Op, e.Name, msg)
}

func (e *Error) Unwrap() error { return e.Errno }

func errOf(op, name string, err C.int) error {
	return &Error{Op: op, Name: name, Errno: syscall.Errno(-err)}
}

// Entry is a registered name, or a group membership, copied out of the
// table.
type Entry struct {
	Name       string // for a membership: the group
	PID        int    // the owner's pid, on its node
	Node       uint32 // 0: this host
	UID        uint32
	Flags      uint32 // Entry*
	StartTime  uint64 // the owner's start time, clock ticks since boot
	Registered time.Time
	Meta       []byte
}

// Group is a group and its member counts.
type Group struct {
	Name         string
	Members      uint64
	LocalMembers uint64
}

// Options says which registry to open: "" means $PROCREG_SCOPE and
// $PROCREG_DIR, else "default" and /dev/shm.
type Options struct {
	Scope string
	Dir   string
}

// RegisterOptions: standby ownership and leases (procreg_register_opts).
type RegisterOptions struct {
	Queue       bool          // if taken, wait in line (RegisterWith returns false)
	Replaceable bool          // a later Replace registration may take it over
	Replace     bool          // take over a replaceable owner
	Lease       time.Duration // 0: none; else released unless Refresh renews it
}

// Registry is a handle on one scope's registry, safe for concurrent use.
// Close it when done (no other goroutine may be in a call on it then);
// the names stay registered: they belong to the process.
type Registry struct {
	c *C.procreg_t
	// The same, as an integer for the lookup helpers: cgo's check of a
	// pointer argument costs a heap allocation per call.
	h      C.uintptr_t
	closed atomic.Bool
	// Closed by Close, which then waits for the goroutines of Watch:
	// they call into the handle, which it is about to free.
	done    chan struct{}
	watches sync.WaitGroup
}

// Open the registry of opts (nil: the defaults). ErrNotFound if no daemon
// ever ran for it.
func Open(opts *Options) (*Registry, error) {
	var scope, dir *C.char
	if opts != nil && opts.Scope != "" {
		scope = C.CString(opts.Scope)
		defer C.free(unsafe.Pointer(scope))
	}
	if opts != nil && opts.Dir != "" {
		dir = C.CString(opts.Dir)
		defer C.free(unsafe.Pointer(dir))
	}
	var err C.int
	c := C.go_open(scope, dir, &err)
	if c == nil {
		return nil, errOf("open", "", err)
	}
	return &Registry{c: c, h: C.uintptr_t(uintptr(unsafe.Pointer(c))), done: make(chan struct{})}, nil
}

// Close ends the handle's watches (their channels are closed when it
// returns) and releases the handle.
func (r *Registry) Close() error {
	if r.closed.Swap(true) {
		return ErrClosed
	}
	close(r.done)
	r.watches.Wait()
	C.procreg_close(r.c)
	return nil
}

// entryFrom is the Entry of a lookup's answer RES for NAME, with META.
func entryFrom(name string, res *C.struct_go_entry, meta []byte) Entry {
	return Entry{
		Name:       name,
		PID:        int(res.pid),
		Node:       uint32(res.node),
		UID:        uint32(res.uid),
		Flags:      uint32(res.flags),
		StartTime:  uint64(res.start_time),
		Registered: time.Unix(0, int64(res.registered_ns)),
		Meta:       meta,
	}
}

// Lookup returns NAME's entry, or an error that matches ErrNotFound if it
// is not registered. It reads the shared table (no system call) and
// allocates only the returned Meta, when there is metadata.
func (r *Registry) Lookup(name string) (Entry, error) {
	res := C.go_lookup(r.h, name, nil, 0)
	if res.err != 0 {
		return Entry{}, errOf("lookup", name, res.err)
	}
	e := entryFrom(name, &res, nil)
	n := int(res.meta_len)
	if n <= C.GO_META_INLINE {
		if n > 0 {
			// A copy by Go, not C.GoBytes: a pointer into res given
			// to a cgo helper would move res to the heap.
			e.Meta = make([]byte, n)
			copy(e.Meta, (*[C.GO_META_INLINE]byte)(unsafe.Pointer(&res.meta))[:n])
		}
		return e, nil
	}
	// Longer metadata: again, into a buffer of its size (C's, as a Go
	// pointer would have to be pinned for the call).
	for {
		big := C.malloc(C.size_t(n))
		res = C.go_lookup(r.h, name, big, C.size_t(n))
		if res.err == 0 && int(res.meta_len) <= n {
			e.Meta = C.GoBytes(big, C.int(res.meta_len))
		}
		C.free(big)
		if res.err != 0 {
			return Entry{}, errOf("lookup", name, res.err)
		}
		if int(res.meta_len) <= n {
			return entryFrom(name, &res, e.Meta), nil
		}
		n = int(res.meta_len)
	}
}

// LookupInto is Lookup for a caller that looks names up again and again:
// it fills *E in place, the metadata into E.Meta's room (capacity), which
// it replaces with a larger slice only when the metadata does not fit. A
// hit that fits, or a miss, allocates nothing. On a hit, *E is what Lookup
// returns, but that without metadata E.Meta is emptied (nil only if it
// had no room), not set to nil; E.Meta's bytes are overwritten in place,
// so a slice of them kept from before changes too. A name not registered
// is false and a nil error. On a miss or an error, *E is the zero Entry
// but for E.Meta, emptied with its room kept: the library may have copied
// into that room before finding the name gone.
func (r *Registry) LookupInto(name string, e *Entry) (bool, error) {
	meta := e.Meta[:cap(e.Meta)]
	var res C.struct_go_entry
	for {
		// Room past the inline buffer: C writes there directly, one
		// copy. A Go pointer to pointer-free memory may be passed for
		// the call; it escapes, but it is the caller's and on the heap
		// already. Taken apart from the call: written in the call,
		// &meta[0] makes cgo check the whole slice, as an interface,
		// which allocates.
		if len(meta) > C.GO_META_INLINE {
			p := unsafe.Pointer(&meta[0])
			res = C.go_lookup(r.h, name, p, C.size_t(len(meta)))
		} else {
			res = C.go_lookup(r.h, name, nil, 0)
		}
		if res.err != 0 {
			*e = Entry{Meta: meta[:0]}
			if res.err == -C.ENOENT {
				return false, nil
			}
			return false, errOf("lookup", name, res.err)
		}
		n := int(res.meta_len)
		if len(meta) > C.GO_META_INLINE {
			if n <= len(meta) {
				meta = meta[:n]
				break
			}
		} else if n <= C.GO_META_INLINE {
			if n > len(meta) {
				meta = make([]byte, n)
			}
			meta = meta[:n]
			copy(meta, (*[C.GO_META_INLINE]byte)(unsafe.Pointer(&res.meta))[:n])
			break
		}
		// Cut: again with room for all of it. It may have grown
		// meanwhile, whence the loop.
		meta = make([]byte, n)
	}
	*e = entryFrom(name, &res, meta)
	return true, nil
}

// LookupMany looks every name of NAMES up in one call into the library
// (procreg_lookup_many), which overlaps their memory accesses: out[i] gets
// names[i]'s entry, or the zero Entry (Name "") if it is not registered.
// OUT must be at least as long as NAMES. Returns how many were found. A
// name that could never be registered fails the call (ErrInvalid,
// ErrNameTooLong) before any is looked up. The Meta of the entries found
// share one allocation, the only one of a call in the steady state.
func (r *Registry) LookupMany(names []string, out []Entry) (int, error) {
	if len(out) < len(names) {
		return 0, &Error{Op: "lookup", Errno: syscall.EINVAL}
	}
	if len(names) == 0 {
		return 0, nil
	}
	size := 0
	for _, n := range names {
		switch {
		case n == "" || strings.IndexByte(n, 0) >= 0:
			return 0, errOf("lookup", n, -C.EINVAL)
		case len(n) > NameMax:
			return 0, errOf("lookup", n, -C.ENAMETOOLONG)
		}
		size += len(n) + 1
	}
	sc := manyPool.Get().(*manyScratch)
	defer func() {
		// A call of very many names does not leave its buffers to
		// every later one.
		if cap(sc.res) <= manyKeep {
			manyPool.Put(sc)
		}
	}()
	if cap(sc.res) < len(names) {
		sc.res = make([]C.struct_go_entry, len(names))
	}
	res := sc.res[:len(names)]
	// Go memory without pointers in it, which cgo lets C read and write
	// for the call's duration.
	buf := sc.names[:0]
	for _, n := range names {
		buf = append(append(buf, n...), 0)
	}
	sc.names = buf
	found := C.go_lookup_many(r.h, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(names)), &res[0])
	if found < 0 {
		return 0, errOf("lookup", "", found)
	}
	inline := 0
	for i := range res {
		if res[i].err == 0 && res[i].meta_len <= C.GO_META_INLINE {
			inline += int(res[i].meta_len)
		}
	}
	metas := make([]byte, inline)
	for i := range res {
		c := &res[i]
		switch c.err {
		case 0:
		case -C.ENOENT:
			out[i] = Entry{}
			continue
		default:
			return 0, errOf("lookup", names[i], c.err)
		}
		n := int(c.meta_len)
		if n > C.GO_META_INLINE {
			// Rare: the long metadata again, with the rest of its
			// entry, as a lookup of its own.
			e, err := r.Lookup(names[i])
			switch {
			case errors.Is(err, ErrNotFound):
				out[i] = Entry{}
				found--
			case err != nil:
				return 0, err
			default:
				out[i] = e
			}
			continue
		}
		e := Entry{
			Name:       names[i],
			PID:        int(c.pid),
			Node:       uint32(c.node),
			UID:        uint32(c.uid),
			Flags:      uint32(c.flags),
			StartTime:  uint64(c.start_time),
			Registered: time.Unix(0, int64(c.registered_ns)),
		}
		if n > 0 {
			e.Meta = metas[:n:n]
			copy(e.Meta, (*[C.GO_META_INLINE]byte)(unsafe.Pointer(&c.meta))[:n])
			metas = metas[n:]
		}
		out[i] = e
	}
	return int(found), nil
}

// The buffers of LookupMany, reused: a call's garbage is then only the
// metadata it returns.
type manyScratch struct {
	names []byte
	res   []C.struct_go_entry
}

var manyPool = sync.Pool{New: func() any { return new(manyScratch) }}

const manyKeep = 4096 // names: about 450 KiB of results

// Contains says whether NAME is registered.
func (r *Registry) Contains(name string) (bool, error) {
	switch err := C.go_contains(r.h, name); err {
	case 0:
		return true, nil
	case -C.ENOENT:
		return false, nil
	default:
		return false, errOf("lookup", name, err)
	}
}

func metaPtr(meta []byte) unsafe.Pointer {
	if len(meta) == 0 {
		return nil
	}
	return unsafe.Pointer(&meta[0])
}

func (r *Registry) call(op C.int, opName, name string, meta []byte, flags C.uint, lease time.Duration,
	count uint64, timeoutMS C.int) C.int {
	return C.go_call(r.c, op, name, metaPtr(meta), C.size_t(len(meta)), flags,
		C.uint32_t(lease/time.Millisecond), C.uint64_t(count), timeoutMS)
}

// Register NAME for this process (again: replace its metadata). ErrTaken
// if another process holds it.
func (r *Registry) Register(name string, meta []byte) error {
	if err := r.call(C.GO_REGISTER, "register", name, meta, 0, 0, 0, 0); err != 0 {
		return errOf("register", name, err)
	}
	return nil
}

// RegisterWith registers with options: true once NAME is ours, false if
// Queue put us in line behind its owner.
func (r *Registry) RegisterWith(name string, meta []byte, o RegisterOptions) (bool, error) {
	var flags C.uint
	if o.Queue {
		flags |= C.PROCREG_QUEUE
	}
	if o.Replaceable {
		flags |= C.PROCREG_REPLACEABLE
	}
	if o.Replace {
		flags |= C.PROCREG_REPLACE
	}
	switch err := r.call(C.GO_REGISTER, "register", name, meta, flags, o.Lease, 0, 0); err {
	case 0:
		return true, nil
	case -C.EINPROGRESS:
		return false, nil
	default:
		return false, errOf("register", name, err)
	}
}

func (r *Registry) simple(op C.int, opName, name string, meta []byte) error {
	if err := r.call(op, opName, name, meta, 0, 0, 0, 0); err != 0 {
		return errOf(opName, name, err)
	}
	return nil
}

// Unregister removes NAME: ErrNotFound if it is not registered.
func (r *Registry) Unregister(name string) error {
	return r.simple(C.GO_UNREGISTER, "unregister", name, nil)
}

// Refresh renews NAME's lease (and our leased membership of group NAME).
func (r *Registry) Refresh(name string) error {
	return r.simple(C.GO_REFRESH, "refresh", name, nil)
}

// Join GROUP (again: replace the membership's metadata).
func (r *Registry) Join(group string, meta []byte) error {
	return r.simple(C.GO_JOIN, "join", group, meta)
}

// Leave GROUP: ErrNotFound if not a member.
func (r *Registry) Leave(group string) error {
	return r.simple(C.GO_LEAVE, "leave", group, nil)
}

func timeoutMS(d time.Duration) C.int {
	if d < 0 {
		return -1
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond // never end early
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return C.int(ms)
}

// A wait of the library, again after a signal for what is left.
func (r *Registry) wait(op C.int, opName, name string, count uint64, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		switch err := r.call(op, opName, name, nil, 0, 0, count, timeoutMS(timeout)); err {
		case 0:
			return true, nil
		case -C.ETIMEDOUT:
			return false, nil
		case -C.EINTR:
			if timeout >= 0 {
				if timeout = time.Until(deadline); timeout < 0 {
					timeout = 0
				}
			}
		default:
			return false, errOf(opName, name, err)
		}
	}
}

// Wait blocks until NAME is registered: true, or false after TIMEOUT (a
// negative one: no limit).
func (r *Registry) Wait(name string, timeout time.Duration) (bool, error) {
	return r.wait(C.GO_WAIT, "wait", name, 0, timeout)
}

// WaitGroup blocks until GROUP has at least COUNT members.
func (r *Registry) WaitGroup(group string, count uint64, timeout time.Duration) (bool, error) {
	return r.wait(C.GO_WAIT_GROUP, "wait", group, count, timeout)
}

// Sync returns once the daemon has processed every request and every
// process death that happened before the call.
func (r *Registry) Sync() error {
	if err := C.procreg_sync(r.c); err != 0 {
		return errOf("sync", "", err)
	}
	return nil
}

func (r *Registry) walk(what C.int, op, name string) ([]C.struct_go_item, func(), error) {
	l := (*C.struct_go_list)(C.malloc(C.sizeof_struct_go_list))
	err := C.go_walk(r.c, what, name, l)
	free := func() {
		C.go_list_free(l)
		C.free(unsafe.Pointer(l))
	}
	if err < 0 {
		free()
		return nil, nil, errOf(op, name, err)
	}
	if l.n == 0 {
		return nil, free, nil
	}
	return unsafe.Slice(l.items, int(l.n)), free, nil
}

func entriesOf(items []C.struct_go_item) []Entry {
	out := make([]Entry, 0, len(items))
	for i := range items {
		e := &items[i].e
		var meta []byte
		if e.meta_len > 0 {
			meta = C.GoBytes(e.meta, C.int(e.meta_len))
		}
		out = append(out, Entry{
			Name:       C.GoString(&e.name[0]),
			PID:        int(e.pid),
			Node:       uint32(e.node),
			UID:        uint32(e.uid),
			Flags:      uint32(e.flags),
			StartTime:  uint64(e.start_time),
			Registered: time.Unix(0, int64(e.registered_ns)),
			Meta:       meta,
		})
	}
	return out
}

// Members returns the members of GROUP (none if it has none).
func (r *Registry) Members(group string) ([]Entry, error) {
	return r.walkEntries(C.GO_MEMBERS, "members", group)
}

// Entries returns every registered name.
func (r *Registry) Entries() ([]Entry, error) {
	return r.walkEntries(C.GO_ENTRIES, "entries", "")
}

// walkEntries copies out the entries of a walk that yields entries.
func (r *Registry) walkEntries(what C.int, op, group string) ([]Entry, error) {
	items, free, err := r.walk(what, op, group)
	if err != nil {
		return nil, err
	}
	defer free()
	return entriesOf(items), nil
}

// Groups returns every group with its member counts.
func (r *Registry) Groups() ([]Group, error) {
	items, free, err := r.walk(C.GO_GROUPS, "groups", "")
	if err != nil {
		return nil, err
	}
	defer free()
	out := make([]Group, 0, len(items))
	for i := range items {
		g := &items[i].g
		out = append(out, Group{Name: C.GoString(&g.name[0]), Members: uint64(g.members),
			LocalMembers: uint64(g.local_members)})
	}
	return out, nil
}

// Version is the version of the libprocreg loaded.
func Version() string {
	return C.GoString(C.procreg_version())
}

// nextEvent reads the event after cursor, waiting up to timeoutMS: the
// event, the new cursor, and 0 or the errno (ETIMEDOUT: none came).
func (r *Registry) nextEvent(cursor uint64, timeoutMS int) (Event, uint64, syscall.Errno) {
	res := C.go_next_event(r.c, C.uint64_t(cursor), C.int(timeoutMS))
	if res.err != 0 {
		return Event{}, uint64(res.cursor), syscall.Errno(-res.err)
	}
	e := &res.ev
	return Event{Seq: uint64(e.seq), Time: time.Unix(0, int64(e.time_ns)), Kind: EventKind(e._type),
		IsGroup: e.is_group != 0, PID: int(e.pid), Node: uint32(e.node), UID: uint32(e.uid),
		StartTime: uint64(e.start_time), Name: C.GoString(&e.name[0])}, uint64(res.cursor), 0
}
