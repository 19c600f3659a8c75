// SPDX-License-Identifier: BSD-2-Clause

// Package cgofloor is the cost of a cgo call alone, for the benchmark: a
// C function that does nothing, called with the arguments of a lookup (a
// pointer and a Go string).
package cgofloor

/*
// As procreg's helpers are compiled, whatever $CGO_CFLAGS says.
#cgo CFLAGS: -O2
#include <stdint.h>
static inline int noop(uintptr_t p, _GoString_ s)
{
	(void)p;
	(void)s;
	return 0;
}
*/
import "C"

// Call crosses into C and back.
func Call(name string) int {
	return int(C.noop(0, name))
}
