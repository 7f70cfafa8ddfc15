//go:build cgo

package main

// A store.Store over a caller's callbacks (detcollStore of
// include/detcoll.h), so that a communicator can rendezvous through a
// key-value store the caller already has, such as the c10d Store that
// torch.distributed hands a process-group constructor. The callbacks are
// called from library threads, possibly several at once.

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*detcoll_cb_set)(void*, const char*, const void*, size_t);
typedef int (*detcoll_cb_get)(void*, const char*, int, void*, size_t, size_t*);
typedef int (*detcoll_cb_add)(void*, const char*, int64_t, int64_t*);
typedef int (*detcoll_cb_del)(void*, const char*, int*);

// The layout of detcollStore (include/detcoll.h).
typedef struct {
	void* ctx;
	detcoll_cb_set set;
	detcoll_cb_get get;
	detcoll_cb_add add;
	detcoll_cb_del del;
} detcoll_capi_store;

static int detcoll_store_set(const detcoll_capi_store* s, const char* k, const void* v, size_t n) {
	return s->set(s->ctx, k, v, n);
}
static int detcoll_store_get(const detcoll_capi_store* s, const char* k, int ms, void* buf, size_t cap, size_t* n) {
	return s->get(s->ctx, k, ms, buf, cap, n);
}
static int detcoll_store_add(const detcoll_capi_store* s, const char* k, int64_t d, int64_t* r) {
	return s->add(s->ctx, k, d, r);
}
static int detcoll_store_del(const detcoll_capi_store* s, const char* k, int* existed) {
	if (s->del == NULL) return -1;
	return s->del(s->ctx, k, existed);
}
static int detcoll_store_ok(const detcoll_capi_store* s) {
	return s->set != NULL && s->get != NULL && s->add != NULL;
}
static detcoll_capi_store* detcoll_store_copy(const void* p) {
	detcoll_capi_store* s = (detcoll_capi_store*)malloc(sizeof *s);
	if (s != NULL) memcpy(s, p, sizeof *s);
	return s;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll/store"
)

// errStoreCallback is wrapped by every failure a callback reports.
var errStoreCallback = errors.New("store callback failed")

// cbPoll bounds one get callback, so that a cancelled context (a peer that
// failed to join, an abort) is noticed within it.
const cbPoll = 200 * time.Millisecond

// cbStore is a store.Store over a detcollStore. Close makes later calls fail
// with store.ErrClosed and waits for calls in flight, after which the
// callbacks are never called again.
type cbStore struct {
	mu     sync.RWMutex // held shared by every callback in flight
	s      *C.detcoll_capi_store
	closed bool
}

var _ store.Store = (*cbStore)(nil)

// newCBStore copies the caller's detcollStore (the caller may free it once
// the creating call returns; the callbacks and their ctx must stay valid
// until the communicator is destroyed).
func newCBStore(p unsafe.Pointer) (*cbStore, error) {
	if p == nil {
		return nil, argError("store is NULL")
	}
	s := C.detcoll_store_copy(p)
	if s == nil {
		return nil, fmt.Errorf("out of memory copying the store")
	}
	if C.detcoll_store_ok(s) == 0 {
		C.free(unsafe.Pointer(s))
		return nil, argError("store: set, get and add must not be NULL")
	}
	return &cbStore{s: s}, nil
}

// call runs fn with the callbacks, unless the store is closed.
func (c *cbStore) call(op, key string, fn func(s *C.detcoll_capi_store, k *C.char) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return fmt.Errorf("store %s %q: %w", op, key, store.ErrClosed)
	}
	k := C.CString(key)
	defer C.free(unsafe.Pointer(k))
	return fn(c.s, k)
}

func cbErr(op, key string, rc C.int) error {
	return fmt.Errorf("store %s %q: %w (callback returned %d)", op, key, errStoreCallback, int(rc))
}

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func (c *cbStore) Set(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store set %q: %w", key, err)
	}
	return c.call("set", key, func(s *C.detcoll_capi_store, k *C.char) error {
		if rc := C.detcoll_store_set(s, k, bytesPtr(value), C.size_t(len(value))); rc != 0 {
			return cbErr("set", key, rc)
		}
		return nil
	})
}

// Get polls the get callback, each call bounded by cbPoll, until the key
// exists or ctx is done. A callback that answers "not there" sooner (a
// non-blocking store) is asked again after a backoff of 1 ms doubling to
// 50 ms.
func (c *cbStore) Get(ctx context.Context, key string) ([]byte, error) {
	buf := make([]byte, 256)
	backoff := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("store get %q: %w: %w", key, store.ErrTimeout, err)
		}
		wait := cbPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, max(time.Until(dl), time.Millisecond))
		}
		var n C.size_t
		var found bool
		start := time.Now()
		err := c.call("get", key, func(s *C.detcoll_capi_store, k *C.char) error {
			rc := C.detcoll_store_get(s, k, C.int(wait.Milliseconds()), bytesPtr(buf), C.size_t(len(buf)), &n)
			switch rc {
			case 0:
				found = true
			case 1: // not there yet
			default:
				return cbErr("get", key, rc)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if !found {
			if rest := backoff - time.Since(start); rest > 0 {
				t := time.NewTimer(rest)
				select {
				case <-ctx.Done():
					t.Stop()
				case <-t.C:
				}
			}
			backoff = min(2*backoff, 50*time.Millisecond)
			continue
		}
		if int(n) <= len(buf) {
			return append([]byte(nil), buf[:n]...), nil
		}
		buf = make([]byte, int(n)) // too small: ask again with room for it
	}
}

func (c *cbStore) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if _, err := c.Get(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

func (c *cbStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("store add %q: %w", key, err)
	}
	var v C.int64_t
	err := c.call("add", key, func(s *C.detcoll_capi_store, k *C.char) error {
		if rc := C.detcoll_store_add(s, k, C.int64_t(delta), &v); rc != 0 {
			return cbErr("add", key, rc)
		}
		return nil
	})
	return int64(v), err
}

// CompareSet is not offered by the callbacks (nothing in the library that
// a store-made communicator uses needs it).
func (c *cbStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	return nil, fmt.Errorf("store compareset %q: %w: the caller's store has no compare-and-set", key, errStoreCallback)
}

func (c *cbStore) Delete(ctx context.Context, key string) (bool, error) {
	var existed C.int
	err := c.call("delete", key, func(s *C.detcoll_capi_store, k *C.char) error {
		if rc := C.detcoll_store_del(s, k, &existed); rc != 0 {
			return cbErr("delete", key, rc)
		}
		return nil
	})
	return existed != 0, err
}

func (c *cbStore) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		C.free(unsafe.Pointer(c.s))
		c.s = nil
	}
	return nil
}
