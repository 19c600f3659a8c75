// SPDX-License-Identifier: BSD-2-Clause

package procreg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A private procregd for one test: its own directory and scope, never the
// host's registry. PROCREG_BUILD_DIR names the build tree whose procregd
// and procreg (the CLI, for other processes that hold names) run.
type daemon struct {
	dir, scope, build string
	cmd               *exec.Cmd
}

func startDaemon(t *testing.T) (*daemon, *Registry) {
	t.Helper()
	build := os.Getenv("PROCREG_BUILD_DIR")
	if build == "" {
		t.Fatal("PROCREG_BUILD_DIR is not set: it names the build tree with procregd")
	}
	d := &daemon{dir: t.TempDir(), scope: "gotest", build: build}
	log, err := os.Create(filepath.Join(d.dir, "procregd.log"))
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(filepath.Join(build, "procregd"), "--foreground", "--dir", d.dir, "--scope", d.scope)
	d.cmd.Stderr = log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		err := d.cmd.Wait()
		log.Close()
		if err != nil {
			out, _ := os.ReadFile(filepath.Join(d.dir, "procregd.log"))
			t.Errorf("procregd: %v\n%s", err, out)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		reg, err := Open(&Options{Scope: d.scope, Dir: d.dir})
		if err == nil {
			if err = reg.Sync(); err == nil {
				t.Cleanup(func() { reg.Close() })
				return d, reg
			}
			reg.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("procregd did not start: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (d *daemon) command(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = append(os.Environ(), "PROCREG_DIR="+d.dir, "PROCREG_SCOPE="+d.scope, "PROCREG_NO_AUTOSTART=1")
	return c
}

// holder starts another process holding NAME (procreg run ... -- sleep).
func (d *daemon) holder(t *testing.T, reg *Registry, name string, args ...string) *exec.Cmd {
	t.Helper()
	c := d.command(filepath.Join(d.build, "procreg"), append(args, "--", "sleep", "600")...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	if ok, err := reg.Wait(name, 30*time.Second); !ok || err != nil {
		t.Fatalf("%v never registered %q: %v", args, name, err)
	}
	return c
}

func startTimeOfSelf(t *testing.T) uint64 {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(stat)
	v, err := strconv.ParseUint(strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLookup(t *testing.T) {
	_, reg := startDaemon(t)
	if _, err := reg.Lookup("svc.pay"); !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("lookup of an absent name: %v", err)
	}
	if ok, err := reg.Contains("svc.pay"); ok || err != nil {
		t.Fatalf("contains: %v %v", ok, err)
	}
	before := time.Now()
	if err := reg.Register("svc.pay", []byte("unix:/run/pay.sock")); err != nil {
		t.Fatal(err)
	}
	e, err := reg.Lookup("svc.pay")
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "svc.pay" || e.PID != os.Getpid() || e.Node != 0 || e.UID != uint32(os.Getuid()) ||
		e.Flags != 0 || string(e.Meta) != "unix:/run/pay.sock" || e.StartTime != startTimeOfSelf(t) {
		t.Fatalf("entry: %+v", e)
	}
	if e.Registered.Before(before.Add(-time.Second)) || e.Registered.After(time.Now().Add(time.Second)) {
		t.Fatalf("registered at %v, the call at %v", e.Registered, before)
	}
	if ok, err := reg.Contains("svc.pay"); !ok || err != nil {
		t.Fatalf("contains: %v %v", ok, err)
	}
	// Metadata past what a lookup brings back inline, up to the limit.
	big := bytes.Repeat([]byte{0xa5}, MetaMax)
	if err := reg.Register("svc.big", big); err != nil {
		t.Fatal(err)
	}
	if e, err := reg.Lookup("svc.big"); err != nil || !bytes.Equal(e.Meta, big) || e.PID != os.Getpid() {
		t.Fatalf("big metadata: %v %d bytes", err, len(e.Meta))
	}
	if err := reg.Register("svc.empty", nil); err != nil {
		t.Fatal(err)
	}
	if e, err := reg.Lookup("svc.empty"); err != nil || e.Meta != nil {
		t.Fatalf("no metadata: %v %v", err, e.Meta)
	}
}

// A hit allocates the returned Meta and nothing else; an entry without
// metadata, nothing.
func TestLookupAllocations(t *testing.T) {
	_, reg := startDaemon(t)
	if err := reg.Register("svc.alloc", []byte("unix:/run/alloc.sock")); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("svc.bare", nil); err != nil {
		t.Fatal(err)
	}
	for name, most := range map[string]float64{"svc.alloc": 1, "svc.bare": 0} {
		var e Entry
		var err error
		n := testing.AllocsPerRun(200, func() { e, err = reg.Lookup(name) })
		if err != nil || e.Name != name {
			t.Fatalf("lookup %s: %v %+v", name, err, e)
		}
		if n > most {
			t.Errorf("lookup %s: %v allocations, want at most %v", name, n, most)
		}
	}
}

// sameEntry fails unless GOT is WANT, every field, but that an empty Meta
// may stand for a nil one.
func sameEntry(t *testing.T, what string, got, want Entry) {
	t.Helper()
	g, w := got, want
	g.Meta, w.Meta = nil, nil
	if !reflect.DeepEqual(g, w) || !bytes.Equal(got.Meta, want.Meta) {
		t.Errorf("%s: %+v, want %+v", what, got, want)
	}
}

// Cleared as documented: the zero Entry, but for Meta emptied with its
// room.
func cleared(t *testing.T, what string, e Entry, room int) {
	t.Helper()
	if !reflect.DeepEqual(e, Entry{Meta: e.Meta}) || len(e.Meta) != 0 || cap(e.Meta) != room {
		t.Errorf("%s: %+v (room %d), want it cleared with room %d", what, e, cap(e.Meta), room)
	}
}

func TestLookupInto(t *testing.T) {
	_, reg := startDaemon(t)
	// No metadata, inline-sized, just past the inline buffer, the most.
	metas := map[string][]byte{
		"svc.into.bare":  nil,
		"svc.into.small": []byte("unix:/run/into.sock"),
		"svc.into.mid":   bytes.Repeat([]byte{0x3c}, metaInline+1),
		"svc.into.big":   bytes.Repeat([]byte{0xc3}, MetaMax),
	}
	names := []string{"svc.into.bare", "svc.into.small", "svc.into.mid", "svc.into.big"}
	for _, n := range names {
		if err := reg.Register(n, metas[n]); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]Entry{}
	for _, n := range names {
		e, err := reg.Lookup(n)
		if err != nil || !bytes.Equal(e.Meta, metas[n]) {
			t.Fatalf("lookup %s: %v %+v", n, err, e)
		}
		want[n] = e
	}

	for _, n := range names {
		// From no room, then from the room that left: equal both
		// times, and the second without an allocation.
		var e Entry
		if ok, err := reg.LookupInto(n, &e); !ok || err != nil {
			t.Fatalf("lookup into %s: %v %v", n, ok, err)
		}
		sameEntry(t, n+" from no room", e, want[n])
		var ok bool
		var err error
		allocs := testing.AllocsPerRun(200, func() { ok, err = reg.LookupInto(n, &e) })
		if !ok || err != nil {
			t.Fatalf("lookup into %s again: %v %v", n, ok, err)
		}
		sameEntry(t, n+" again", e, want[n])
		if allocs != 0 {
			t.Errorf("lookup into %s with room: %v allocations, want 0", n, allocs)
		}
	}

	// One Entry through every name, in both orders of size: smaller
	// metadata goes into the room already there, larger grows it.
	var e Entry
	for _, order := range [][]string{names, {names[3], names[2], names[1], names[0], names[1]}} {
		for _, n := range order {
			room := cap(e.Meta)
			if ok, err := reg.LookupInto(n, &e); !ok || err != nil {
				t.Fatalf("lookup into %s: %v %v", n, ok, err)
			}
			sameEntry(t, n+" reusing one Entry", e, want[n])
			if len(metas[n]) <= room && cap(e.Meta) != room {
				t.Errorf("%s: room %d became %d, with %d bytes to fit", n, room, cap(e.Meta), len(metas[n]))
			}
		}
	}

	// Room of the caller's is written in place, whichever way the
	// metadata comes back, and a slice too short for it is replaced.
	for _, c := range []struct {
		name string
		room int
	}{{"svc.into.small", metaInline}, {"svc.into.small", 200}, {"svc.into.mid", metaInline + 1},
		{"svc.into.big", MetaMax}, {"svc.into.small", 5}, {"svc.into.mid", metaInline}, {"svc.into.big", 100}} {
		buf := make([]byte, 0, c.room)
		e := Entry{Meta: buf}
		if ok, err := reg.LookupInto(c.name, &e); !ok || err != nil {
			t.Fatalf("lookup into %s, room %d: %v %v", c.name, c.room, ok, err)
		}
		sameEntry(t, fmt.Sprintf("%s, room %d", c.name, c.room), e, want[c.name])
		fits := len(metas[c.name]) <= c.room
		if in := &buf[:1][0] == &e.Meta[:1][0]; in != fits {
			t.Errorf("%s, room %d: written in the caller's room %v, want %v", c.name, c.room, in, fits)
		}
	}

	// A miss, with an Entry full of a hit: false and no error, the
	// Entry cleared and its room kept, without an allocation.
	if ok, err := reg.LookupInto("svc.into.big", &e); !ok || err != nil {
		t.Fatal(ok, err)
	}
	room := cap(e.Meta)
	var ok bool
	var err error
	allocs := testing.AllocsPerRun(100, func() { ok, err = reg.LookupInto("svc.into.absent", &e) })
	if ok || err != nil {
		t.Fatalf("lookup into an absent name: %v %v", ok, err)
	}
	cleared(t, "after a miss", e, room)
	if allocs != 0 {
		t.Errorf("a miss: %v allocations, want 0", allocs)
	}
	// Gone since: a miss too.
	if err := reg.Unregister("svc.into.small"); err != nil {
		t.Fatal(err)
	}
	reg.LookupInto("svc.into.mid", &e)
	if ok, err := reg.LookupInto("svc.into.small", &e); ok || err != nil {
		t.Fatalf("lookup into an unregistered name: %v %v", ok, err)
	}
	cleared(t, "after an unregistered name", e, room)
	// A name that could never be registered is an error, not a miss,
	// and clears the Entry the same.
	for _, c := range []struct {
		name string
		want error
	}{{"", ErrInvalid}, {"a\x00b", ErrInvalid}, {strings.Repeat("n", NameMax+1), ErrNameTooLong}} {
		reg.LookupInto("svc.into.mid", &e)
		if ok, err := reg.LookupInto(c.name, &e); ok || !errors.Is(err, c.want) {
			t.Errorf("lookup into %q: %v %v, want %v", c.name, ok, err, c.want)
		}
		cleared(t, fmt.Sprintf("after %q", c.name), e, room)
	}
}

func TestLookupMany(t *testing.T) {
	_, reg := startDaemon(t)
	var names []string
	for i := 0; i < 100; i++ { // more than one C-side batch
		names = append(names, fmt.Sprintf("svc.many.%03d", i))
	}
	big := bytes.Repeat([]byte{0x5a}, MetaMax)
	for i, n := range names {
		if i%3 == 2 {
			continue // left unregistered
		}
		meta := []byte("meta-" + n)
		switch i % 10 {
		case 0:
			meta = nil
		case 1:
			meta = big
		}
		if err := reg.Register(n, meta); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]Entry, len(names)+1)
	out[2] = Entry{Name: "stale"} // an absent name's slot is cleared
	found, err := reg.LookupMany(names, out)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i, n := range names {
		single, err := reg.Lookup(n)
		if i%3 == 2 {
			if !errors.Is(err, ErrNotFound) || out[i].Name != "" || out[i].Meta != nil {
				t.Errorf("%s: absent, got %+v (single: %v)", n, out[i], err)
			}
			continue
		}
		want++
		if err != nil || out[i].Name != n || out[i].PID != os.Getpid() || !bytes.Equal(out[i].Meta, single.Meta) ||
			out[i].StartTime != single.StartTime || !out[i].Registered.Equal(single.Registered) ||
			out[i].UID != single.UID || (len(single.Meta) == 0) != (out[i].Meta == nil) {
			t.Errorf("%s: %+v, single lookup %+v %v", n, out[i], single, err)
		}
	}
	if found != want {
		t.Errorf("found %d, want %d", found, want)
	}
	// The Meta slices share memory but not room: appending to one
	// leaves the next intact.
	if m := append(out[3].Meta, 'x'); !bytes.Equal(out[4].Meta, []byte("meta-"+names[4])) || len(m) != len(out[3].Meta)+1 {
		t.Errorf("append to one Meta changed another: %q", out[4].Meta)
	}
	if n, err := reg.LookupMany(nil, nil); n != 0 || err != nil {
		t.Errorf("no names: %d %v", n, err)
	}
	if _, err := reg.LookupMany(names, out[:3]); !errors.Is(err, ErrInvalid) {
		t.Errorf("out too short: %v", err)
	}
	for _, c := range []struct {
		name string
		want error
	}{{"", ErrInvalid}, {"a\x00b", ErrInvalid}, {strings.Repeat("n", NameMax+1), ErrNameTooLong}} {
		var perr *Error
		if _, err := reg.LookupMany([]string{names[0], c.name}, out); !errors.Is(err, c.want) ||
			!errors.As(err, &perr) || perr.Name != c.name {
			t.Errorf("lookup many with %q: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestInvalid(t *testing.T) {
	_, reg := startDaemon(t)
	for _, c := range []struct {
		name string
		want error
	}{{"", ErrInvalid}, {"a\x00b", ErrInvalid}, {strings.Repeat("n", NameMax+1), ErrNameTooLong}} {
		if err := reg.Register(c.name, nil); !errors.Is(err, c.want) {
			t.Errorf("register %q: %v, want %v", c.name, err, c.want)
		}
		if _, err := reg.Lookup(c.name); !errors.Is(err, c.want) {
			t.Errorf("lookup %q: %v, want %v", c.name, err, c.want)
		}
	}
	if err := reg.Register("svc.huge", make([]byte, MetaMax+1)); !errors.Is(err, ErrTooBig) {
		t.Errorf("metadata over the limit: %v", err)
	}
	var perr *Error
	if err := reg.Unregister("svc.absent"); !errors.As(err, &perr) || perr.Op != "unregister" ||
		perr.Name != "svc.absent" || perr.Errno != syscall.ENOENT || !strings.Contains(err.Error(), "svc.absent") {
		t.Errorf("unregister of an absent name: %#v", err)
	}
}

func TestTakenQueueAndDeath(t *testing.T) {
	d, reg := startDaemon(t)
	h := d.holder(t, reg, "svc.held", "run", "svc.held", "--meta", "theirs")
	e, err := reg.Lookup("svc.held")
	if err != nil || e.PID != h.Process.Pid || string(e.Meta) != "theirs" {
		t.Fatalf("held: %+v %v", e, err)
	}
	err = reg.Register("svc.held", []byte("mine"))
	if !errors.Is(err, ErrTaken) || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("register of a taken name: %v", err)
	}
	if owned, err := reg.RegisterWith("svc.held", []byte("next"), RegisterOptions{Queue: true}); owned || err != nil {
		t.Fatalf("queued: %v %v", owned, err)
	}
	h.Process.Kill()
	h.Wait()
	if err := reg.Sync(); err != nil {
		t.Fatal(err)
	}
	if e, err := reg.Lookup("svc.held"); err != nil || e.PID != os.Getpid() || string(e.Meta) != "next" {
		t.Fatalf("after the owner died: %+v %v", e, err)
	}
}

func TestGroups(t *testing.T) {
	d, reg := startDaemon(t)
	h := d.holder(t, reg, "svc.worker", "run", "svc.worker", "--group", "workers", "--meta", "w")
	for _, g := range []string{"workers", "cache"} {
		if err := reg.Join(g, []byte("me")); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := reg.WaitGroup("workers", 2, 30*time.Second); !ok || err != nil {
		t.Fatalf("wait group: %v %v", ok, err)
	}
	if ok, err := reg.WaitGroup("workers", 3, 20*time.Millisecond); ok || err != nil {
		t.Fatalf("wait group 3: %v %v", ok, err)
	}
	m, err := reg.Members("workers")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range m {
		got = append(got, e.Name+"/"+strconv.Itoa(e.PID)+"/"+string(e.Meta))
	}
	sort.Strings(got)
	want := []string{"workers/" + strconv.Itoa(os.Getpid()) + "/me", "workers/" + strconv.Itoa(h.Process.Pid) + "/w"}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("members: %v, want %v", got, want)
	}
	groups, err := reg.Groups()
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	if len(groups) != 2 || groups[0] != (Group{"cache", 1, 1}) || groups[1] != (Group{"workers", 2, 2}) {
		t.Fatalf("groups: %+v", groups)
	}
	if err := reg.Leave("cache"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Leave("cache"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("leave again: %v", err)
	}
	if m, err := reg.Members("cache"); len(m) != 0 || err != nil {
		t.Fatalf("members of an empty group: %v %v", m, err)
	}
	all, err := reg.Entries()
	if err != nil || len(all) != 1 || all[0].Name != "svc.worker" {
		t.Fatalf("entries: %+v %v", all, err)
	}
}

func TestWaitFromAnotherGoroutine(t *testing.T) {
	_, reg := startDaemon(t)
	if ok, err := reg.Wait("svc.late", 20*time.Millisecond); ok || err != nil {
		t.Fatalf("wait for an absent name: %v %v", ok, err)
	}
	registered := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		registered <- reg.Register("svc.late", []byte("here"))
	}()
	// The name is in the table before its reply reaches the goroutine,
	// so Wait may return while Register is still inside the library:
	// the cleanup's Close must not free the handle under it. Deferred,
	// this runs before the cleanups, however the test ends.
	defer func() {
		if err := <-registered; err != nil {
			t.Errorf("register from another goroutine: %v", err)
		}
	}()
	if ok, err := reg.Wait("svc.late", -1); !ok || err != nil {
		t.Fatalf("wait: %v %v", ok, err)
	}
}

func TestWatch(t *testing.T) {
	d, reg := startDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := reg.Watch(ctx)
	reg.Register("svc.w", []byte("1"))
	reg.Register("svc.w", []byte("2"))
	reg.Join("g.w", nil)
	reg.Unregister("svc.w")
	h := d.holder(t, reg, "svc.other", "run", "svc.other")
	h.Process.Kill()
	h.Wait()
	want := []struct {
		kind    EventKind
		name    string
		isGroup bool
		pid     int
	}{
		{EventRegistered, "svc.w", false, os.Getpid()}, {EventUpdated, "svc.w", false, os.Getpid()},
		{EventJoined, "g.w", true, os.Getpid()}, {EventUnregistered, "svc.w", false, os.Getpid()},
		{EventRegistered, "svc.other", false, h.Process.Pid}, {EventDied, "svc.other", false, h.Process.Pid},
	}
	var first uint64
	for i, w := range want {
		select {
		case ev := <-ch:
			if ev.Kind != w.kind || ev.Name != w.name || ev.IsGroup != w.isGroup || ev.PID != w.pid {
				t.Fatalf("event %d: %+v, want %+v", i, ev, w)
			}
			if i == 0 {
				first = ev.Seq
			} else if ev.Seq != first+uint64(i) {
				t.Fatalf("event %d: seq %d after %d", i, ev.Seq, first)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("event %d never came", i)
		}
	}
	cancel()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("an event after the last: %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the channel stayed open after the context ended")
	}
}

// Close ends the watches of the handle, whose goroutines call into it,
// before it frees it: here one whose context never ends, with more events
// than its channel holds and none read, so that it may be waiting to send.
func TestCloseEndsWatch(t *testing.T) {
	d, reg := startDaemon(t)
	other, err := Open(&Options{Scope: d.scope, Dir: d.dir})
	if err != nil {
		t.Fatal(err)
	}
	ch := other.Watch(context.Background())
	const n = 100
	for i := 0; i < n; i++ {
		if err := reg.Register(fmt.Sprintf("svc.close.%03d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	// The watch had ended when Close returned: the events it sent are
	// there to read, in order, and then the channel is closed.
	for i := 0; ; i++ {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if want := fmt.Sprintf("svc.close.%03d", i); ev.Kind != EventRegistered || ev.Name != want {
				t.Fatalf("event %d: %+v, want %s registered", i, ev, want)
			}
		default:
			t.Fatalf("the channel was open after Close returned, %d events read", i)
		}
	}
}

func TestClosedAndNoScope(t *testing.T) {
	d, _ := startDaemon(t)
	if _, err := Open(&Options{Scope: "nosuch", Dir: d.dir}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open of a scope never served: %v", err)
	}
	reg, err := Open(&Options{Scope: d.scope, Dir: d.dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != ErrClosed {
		t.Fatalf("close again: %v", err)
	}
}

// The README's example is example/main.go, word for word, and runs.
func TestReadmeExample(t *testing.T) {
	d, _ := startDaemon(t)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- example-go -->\n```go\n(.*?)```\n<!-- /example-go -->").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no Go example between <!-- example-go --> markers")
	}
	src, err := os.ReadFile("example/main.go")
	if err != nil {
		t.Fatal(err)
	}
	// The file's licence line is the tree's, not the example's.
	src = bytes.TrimPrefix(src, []byte("// SPDX-License-Identifier: BSD-2-Clause\n\n"))
	if !bytes.Equal(m[1], src) {
		t.Fatal("README.md's Go example and bindings/go/example/main.go differ")
	}
	exe := filepath.Join(t.TempDir(), "example")
	if out, err := exec.Command("go", "build", "-o", exe, "./example").CombinedOutput(); err != nil {
		t.Fatalf("go build ./example: %v\n%s", err, out)
	}
	c := d.command(exe)
	var out bytes.Buffer
	c.Stdout = &out
	if err := c.Run(); err != nil {
		t.Fatalf("example: %v", err)
	}
	want := "example.payments: pid " + strconv.Itoa(c.Process.Pid) + " at unix:/run/payments.sock\ngone: true\n"
	if out.String() != want {
		t.Fatalf("example printed %q, want %q", out.String(), want)
	}
}
