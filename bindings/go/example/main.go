// SPDX-License-Identifier: BSD-2-Clause

package main

import (
	"errors"
	"fmt"
	"log"

	"procreg"
)

func main() {
	reg, err := procreg.Open(nil) // $PROCREG_SCOPE and $PROCREG_DIR, or the defaults
	if err != nil {
		log.Fatal(err)
	}
	defer reg.Close()
	if err := reg.Register("example.payments", []byte("unix:/run/payments.sock")); err != nil {
		log.Fatal(err)
	}
	e, err := reg.Lookup("example.payments") // memory reads: no system call
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("example.payments: pid %d at %s\n", e.PID, e.Meta)
	reg.Unregister("example.payments")
	_, err = reg.Lookup("example.payments")
	fmt.Println("gone:", errors.Is(err, procreg.ErrNotFound))
}
