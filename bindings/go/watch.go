// SPDX-License-Identifier: BSD-2-Clause

package procreg

/*
#include <procreg.h>
*/
import "C"

import (
	"context"
	"os"
	"syscall"
	"time"
)

// EventKind says what an Event reports.
type EventKind int

const (
	EventRegistered   EventKind = C.PROCREG_EV_REGISTERED
	EventUnregistered EventKind = C.PROCREG_EV_UNREGISTERED
	EventUpdated      EventKind = C.PROCREG_EV_UPDATED
	EventJoined       EventKind = C.PROCREG_EV_JOINED
	EventLeft         EventKind = C.PROCREG_EV_LEFT
	EventDied         EventKind = C.PROCREG_EV_DIED
	EventTransferred  EventKind = C.PROCREG_EV_TRANSFERRED
	EventReplaced     EventKind = C.PROCREG_EV_REPLACED
	EventExpired      EventKind = C.PROCREG_EV_EXPIRED
	EventRefreshed    EventKind = C.PROCREG_EV_REFRESHED
	EventNodeDown     EventKind = C.PROCREG_EV_NODE_DOWN
	EventConflict     EventKind = C.PROCREG_EV_CONFLICT
	// EventOverflow is Watch's own: the feed lapped the watcher and the
	// events in between were lost (read the table again). Watching goes
	// on from the oldest event left.
	EventOverflow EventKind = -1
)

// Event is a change, from the change feed.
type Event struct {
	Seq       uint64 // 1, 2, 3... in the order of the writes
	Time      time.Time
	Kind      EventKind
	IsGroup   bool // Name is a group
	PID       int
	Node      uint32
	UID       uint32
	StartTime uint64
	Name      string
}

// Watch follows the change feed from now on: every event after the call,
// in order, on the channel, until ctx is done or the Registry is closed
// (then the channel is closed). It waits on the feed's descriptor in Go's
// poller, so a watch holds no thread while nothing happens; without a
// daemon to give one, it waits on the table's futex instead, in slices of
// a quarter second so that it sees ctx end (and Close may wait that long
// for it).
func (r *Registry) Watch(ctx context.Context) <-chan Event {
	ch := make(chan Event, 64)
	cursor := uint64(C.procreg_feed_head(r.c))
	r.watches.Add(1)
	go func() {
		defer r.watches.Done()
		r.watch(ctx, ch, cursor)
	}()
	return ch
}

func (r *Registry) watch(ctx context.Context, ch chan<- Event, cursor uint64) {
	defer close(ch)
	// Close ends the watch as ctx does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	var f *os.File
	if fd := C.procreg_feed_fd(r.c); fd >= 0 {
		f = os.NewFile(uintptr(fd), "procreg-feed")
		defer f.Close()
	}
	var rc syscall.RawConn
	if f != nil {
		var err error
		if rc, err = f.SyscallConn(); err != nil {
			f = nil
		}
	}
	if f != nil {
		// Wake the wait below when ctx ends.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-ctx.Done():
				f.SetReadDeadline(time.Unix(1, 0))
			case <-stop:
			}
		}()
	}
	for ctx.Err() == nil {
		slice := 0
		if f == nil {
			slice = 250
		}
		if f != nil {
			// Clear first: an event published after it leaves the
			// descriptor readable, so none is missed.
			rc.Control(func(fd uintptr) { C.procreg_feed_fd_clear(C.int(fd)) })
		}
		for {
			ev, next, err := r.nextEvent(cursor, slice)
			cursor = next
			switch err {
			case 0:
			case syscall.EOVERFLOW:
				ev = Event{Seq: cursor, Time: time.Now(), Kind: EventOverflow}
			case syscall.ETIMEDOUT, syscall.EINTR:
			default:
				return
			}
			if ev.Kind == 0 {
				break
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
		if f != nil {
			// Returns once readable (or at once, if it turned readable
			// since the last wait), or when ctx ends.
			waited := false
			if err := rc.Read(func(uintptr) bool {
				done := waited
				waited = true
				return done
			}); err != nil {
				return
			}
		}
	}
}
