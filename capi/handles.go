//go:build cgo

package main

import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/detcoll/detcoll"
)

// commEntry is a live communicator of the handle table.
type commEntry struct {
	id   uint64
	comm *detcoll.Comm
	// origin is what the communicator's creation holds besides comm (its
	// store connection, released on destroy) and what a device backend
	// needs; nil for communicators made in process (tests).
	origin *origin

	mu      sync.Mutex
	lastErr string

	devMu  sync.Mutex // guards dev and devErr (held during Attach)
	dev    deviceComm // attached lazily by the first device collective
	devErr error      // a failed attach, returned by every later device call
}

func (e *commEntry) setLastError(msg string) {
	e.mu.Lock()
	e.lastErr = msg
	e.mu.Unlock()
}

func (e *commEntry) lastError() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastErr
}

// handleTag marks the low nibble of every handle, so a pointer passed as a
// handle (aligned, low nibble 0) is never mistaken for one.
const handleTag = 0xD

var handles struct {
	sync.RWMutex
	m    map[uint64]*commEntry
	next uint64 // the last id given out; ids start at 1 and are never reused
}

func handleOf(id uint64) uintptr { return uintptr(id<<4 | handleTag) }

// register adds a communicator to the table and returns its handle.
func register(c *detcoll.Comm, o *origin) uintptr {
	handles.Lock()
	defer handles.Unlock()
	if handles.m == nil {
		handles.m = map[uint64]*commEntry{}
	}
	handles.next++
	e := &commEntry{id: handles.next, comm: c, origin: o}
	handles.m[e.id] = e
	return handleOf(e.id)
}

// lookup returns the live communicator named by h.
func lookup(h uintptr) (*commEntry, error) {
	if h == 0 {
		return nil, argError("comm is NULL")
	}
	if h&0xF != handleTag {
		return nil, argError("comm %#x is not a detcoll communicator handle", h)
	}
	id := uint64(h >> 4)
	handles.RLock()
	e, next := handles.m[id], handles.next
	handles.RUnlock()
	switch {
	case e != nil:
		return e, nil
	case id >= 1 && id <= next:
		return nil, fmt.Errorf("comm %#x: %w (used after detcollCommDestroy or detcollCommAbort)", h, detcoll.ErrClosed)
	}
	return nil, argError("comm %#x is not a detcoll communicator handle", h)
}

// unregister removes h from the table; later lookups report it destroyed.
func unregister(h uintptr) (*commEntry, error) {
	e, err := lookup(h)
	if err != nil {
		return nil, err
	}
	handles.Lock()
	defer handles.Unlock()
	if handles.m[e.id] != e {
		return nil, fmt.Errorf("comm %#x: %w (destroyed concurrently by another thread)", h, detcoll.ErrClosed)
	}
	delete(handles.m, e.id)
	return e, nil
}

// destroy closes a communicator removed from the table.
func (e *commEntry) destroy(abort bool) error {
	if abort {
		// Close the transport first, so that a collective (or an Attach)
		// blocked in another thread returns at once.
		e.comm.Close()
	}
	e.devMu.Lock()
	dev := e.dev
	e.dev, e.devErr = nil, fmt.Errorf("comm: %w", detcoll.ErrClosed)
	e.devMu.Unlock()
	var errs []error
	if dev != nil {
		if abort {
			// The device state may wait for its streams, whose work may
			// wait for a peer that is gone: abort the device work, and
			// never block an abort on the close.
			dev.Abort()
			go dev.Close()
		} else {
			errs = append(errs, dev.Close())
		}
	}
	errs = append(errs, e.comm.Close())
	if e.origin != nil && e.origin.release != nil {
		errs = append(errs, e.origin.release(abort))
	}
	return errors.Join(errs...)
}

// testPanicHook, when set (by tests), runs inside every guarded call.
var testPanicHook func(name string)

// guarded runs fn as the body of the exported function name and returns its
// result: a panic becomes detcollInternalError, and any failure is recorded
// as the calling thread's last error and, when h names a live communicator,
// as that communicator's.
func guarded(name string, h uintptr, fn func() error) (rc result) {
	defer func() {
		if p := recover(); p != nil {
			rc = record(name, h, coded(rcInternalError, "internal error: panic: %v\n%s", p, debug.Stack()))
		}
	}()
	if testPanicHook != nil {
		testPanicHook(name)
	}
	if err := fn(); err != nil {
		return record(name, h, err)
	}
	return rcSuccess
}

// record saves err's message and returns its result.
func record(name string, h uintptr, err error) result {
	code := classify(err)
	msg := fmt.Sprintf("%s: %v", name, err)
	setThreadMessage(slotThread, msg)
	if h != 0 {
		handles.RLock()
		e := handles.m[uint64(h>>4)]
		handles.RUnlock()
		if e != nil && h&0xF == handleTag {
			e.setLastError(msg)
		}
	}
	return code
}

// destroyHandle is detcollCommDestroy (abort false) and detcollCommAbort.
func destroyHandle(name string, h uintptr, abort bool) result {
	return guarded(name, h, func() error {
		e, err := unregister(h)
		if err != nil {
			return err
		}
		return e.destroy(abort)
	})
}

// lastError is detcollGetLastError.
func lastError(h uintptr) *C.char {
	if h != 0 && h&0xF == handleTag {
		handles.RLock()
		e := handles.m[uint64(h>>4)]
		handles.RUnlock()
		if e != nil {
			return setThreadMessage(slotComm, e.lastError())
		}
	}
	return threadMessage(slotThread)
}
