// SPDX-License-Identifier: BSD-2-Clause

// Command bench times a lookup through procreg beside a Go map lookup of
// the same names, and a bare cgo call.
//
//	PROCREG_BUILD_DIR=build go run ./bench [-names N] [-rounds R]
//
// It starts a private procregd (from PROCREG_BUILD_DIR) in a temporary
// directory, registers N names (10^4) with 24 bytes of metadata each, and
// times, round after round, one pass of hits over all the names through:
// a map[string]Entry, a cgo call to a C function that does nothing (with
// a lookup's arguments: the floor of any call into C), Contains (the
// library's lookup, no result), Lookup (the Entry, its metadata
// allocated), LookupInto (one Entry filled again and again, its Meta
// reused) and LookupMany (64 names a call). Prints ns per lookup: median
// of the rounds, and min-max.
// A benchmark, not a test: on a shared machine the figures move.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"time"

	"procreg"
	"procreg/internal/cgofloor"
)

var sink int

// pass times f over every item: ns per name, of count names in all.
func pass[T any](items []T, count int, f func(T)) float64 {
	t := time.Now()
	for _, it := range items {
		f(it)
	}
	return float64(time.Since(t).Nanoseconds()) / float64(count)
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func main() {
	count := flag.Int("names", 10000, "names registered and looked up")
	rounds := flag.Int("rounds", 21, "passes over all the names, per kind")
	flag.Parse()
	// log.Fatal exits without running deferred calls: only here, once
	// bench has stopped its daemon and removed its directory.
	if err := bench(*count, *rounds); err != nil {
		log.Fatal(err)
	}
}

func bench(count, rounds int) error {
	build := os.Getenv("PROCREG_BUILD_DIR")
	if build == "" {
		return errors.New("set PROCREG_BUILD_DIR to the build tree with procregd")
	}
	dir, err := os.MkdirTemp("", "procreg-go-bench.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d := exec.Command(filepath.Join(build, "procregd"), "--foreground", "--scope", "bench", "--dir", dir)
	if err := d.Start(); err != nil {
		return err
	}
	defer func() { d.Process.Signal(syscall.SIGTERM); d.Wait() }()
	var reg *procreg.Registry
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if reg, err = procreg.Open(&procreg.Options{Scope: "bench", Dir: dir}); err == nil {
			if err = reg.Sync(); err == nil {
				break
			}
			reg.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("procregd did not start: %v", err)
		}
	}
	defer reg.Close()

	names := make([]string, 0, count)
	m := make(map[string]procreg.Entry, count)
	for i := 0; i < count; i++ {
		n := fmt.Sprintf("svc.%06d.example", i)
		meta := []byte(fmt.Sprintf("unix:/run/%-14s", n[4:10]))
		if err := reg.Register(n, meta); err != nil {
			return err
		}
		e, err := reg.Lookup(n)
		if err != nil || string(e.Meta) != string(meta) {
			return fmt.Errorf("lookup %s: %v", n, err)
		}
		m[n] = e
		names = append(names, n)
	}
	// Every name once, in another order than they were made.
	var order []string
	for i := 1; i < len(names); i += 2 {
		order = append(order, names[i])
	}
	for i := 0; i < len(names); i += 2 {
		order = append(order, names[i])
	}
	names = order
	// Reads from one thread, as a goroutine that moved would claim a
	// reader slot on each thread it lands on.
	runtime.LockOSThread()

	kinds := []string{"map[name]", "cgo call alone", "Contains", "Lookup", "LookupInto", "LookupMany/64"}
	var into procreg.Entry
	out := make([]procreg.Entry, 64)
	var batches [][]string
	for i := 0; i < len(names); i += len(out) {
		batches = append(batches, names[i:min(i+len(out), len(names))])
	}
	t := make([][]float64, len(kinds))
	for r := 0; r < rounds; r++ {
		t[0] = append(t[0], pass(names, len(names), func(n string) { sink += m[n].PID }))
		t[1] = append(t[1], pass(names, len(names), func(n string) { sink += cgofloor.Call(n) }))
		t[2] = append(t[2], pass(names, len(names), func(n string) {
			if ok, _ := reg.Contains(n); ok {
				sink++
			}
		}))
		t[3] = append(t[3], pass(names, len(names), func(n string) {
			e, _ := reg.Lookup(n)
			sink += len(e.Meta)
		}))
		t[4] = append(t[4], pass(names, len(names), func(n string) {
			reg.LookupInto(n, &into)
			sink += len(into.Meta)
		}))
		t[5] = append(t[5], pass(batches, len(names), func(b []string) {
			n, _ := reg.LookupMany(b, out)
			sink += n
		}))
	}
	allocs := testingAllocs(func() { reg.Lookup(names[0]) })
	allocsInto := testingAllocs(func() { reg.LookupInto(names[0], &into) })
	fmt.Printf("go %s, %d names, %d rounds; ns per lookup: median (min-max)\n", runtime.Version(), len(names), rounds)
	med := make([]float64, len(kinds))
	for i, k := range kinds {
		sort.Float64s(t[i])
		med[i] = t[i][len(t[i])/2]
		fmt.Printf("  %-15s %7.1f  (%.1f-%.1f)\n", k, med[i], t[i][0], t[i][len(t[i])-1])
	}
	fmt.Printf("  Lookup / map[name]  %.2fx; Lookup minus the cgo call %.1f ns; allocations per Lookup %.0f\n",
		med[3]/med[0], med[3]-med[1], allocs)
	fmt.Printf("  LookupInto / map[name]  %.2fx; LookupInto minus the cgo call %.1f ns; allocations per LookupInto %.0f\n",
		med[4]/med[0], med[4]-med[1], allocsInto)
	return nil
}

// testingAllocs counts the heap allocations of one call of f, averaged.
func testingAllocs(f func()) float64 {
	var a, b runtime.MemStats
	const n = 1000
	runtime.ReadMemStats(&a)
	for i := 0; i < n; i++ {
		f()
	}
	runtime.ReadMemStats(&b)
	return float64(b.Mallocs-a.Mallocs) / n
}
