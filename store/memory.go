package store

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
)

// Memory is an in-process Store, safe for concurrent use. The TCP Server
// keeps its data in one.
type Memory struct {
	mu     sync.Mutex
	data   map[string][]byte
	waits  map[string]*waiters // missing keys someone is blocked on
	closed bool
	done   chan struct{} // closed by Close
}

// waiters is shared by everyone blocked on one missing key: put closes ch.
// n counts them so a timed-out last waiter can remove the entry and a loop of
// short Waits on a key that never appears does not grow the map.
type waiters struct {
	ch chan struct{}
	n  int
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory Store.
func NewMemory() *Memory {
	return &Memory{
		data:  make(map[string][]byte),
		waits: make(map[string]*waiters),
		done:  make(chan struct{}),
	}
}

// lock takes m.mu unless the store is closed or ctx is done; on error the
// lock is not held.
func (m *Memory) lock(ctx context.Context) error {
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return ErrClosed
	case ctx.Err() != nil:
		m.mu.Unlock()
		return timeout(ctx)
	}
	return nil
}

// await returns with m.mu held once every key exists at the same instant, or
// with an error and m.mu released. It re-checks all keys after every wake-up,
// so a Delete racing with the wait cannot make it return early.
func (m *Memory) await(ctx context.Context, keys []string) error {
	for {
		if err := m.lock(ctx); err != nil {
			return err
		}
		missing, found := "", false
		for _, k := range keys {
			if _, ok := m.data[k]; !ok {
				missing, found = k, true
				break
			}
		}
		if !found {
			return nil
		}
		w := m.waits[missing]
		if w == nil {
			w = &waiters{ch: make(chan struct{})}
			m.waits[missing] = w
		}
		w.n++
		m.mu.Unlock()
		select {
		case <-w.ch:
		case <-ctx.Done():
		case <-m.done:
		}
		m.mu.Lock()
		if w.n--; w.n == 0 && m.waits[missing] == w {
			delete(m.waits, missing)
		}
		m.mu.Unlock()
	}
}

// put stores v (which the store now owns) and wakes key's waiters. m.mu held.
func (m *Memory) put(key string, v []byte) {
	m.data[key] = v
	if w := m.waits[key]; w != nil {
		close(w.ch)
		delete(m.waits, key)
	}
}

// clone never returns nil, so a stored value is never nil and nil can mean
// "missing" in CompareSet's result.
func clone(b []byte) []byte { return append(make([]byte, 0, len(b)), b...) }

func (m *Memory) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return opError("set", key, err)
	}
	if err := checkValue(value); err != nil {
		return opError("set", key, err)
	}
	if err := m.lock(ctx); err != nil {
		return opError("set", key, err)
	}
	defer m.mu.Unlock()
	m.put(key, clone(value))
	return nil
}

func (m *Memory) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, opError("get", key, err)
	}
	if err := m.await(ctx, []string{key}); err != nil {
		return nil, opError("get", key, err)
	}
	defer m.mu.Unlock()
	return clone(m.data[key]), nil
}

func (m *Memory) Wait(ctx context.Context, keys ...string) error {
	if err := checkKeys(keys); err != nil {
		return opError("wait", joinKeys(keys), err)
	}
	if err := m.await(ctx, keys); err != nil {
		return opError("wait", joinKeys(keys), err)
	}
	m.mu.Unlock()
	return nil
}

func (m *Memory) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, opError("add", key, err)
	}
	if err := m.lock(ctx); err != nil {
		return 0, opError("add", key, err)
	}
	defer m.mu.Unlock()
	var n int64
	if v, ok := m.data[key]; ok {
		var err error
		if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return 0, opError("add", key, fmt.Errorf("%w: value %s", ErrBadCounter, quote(v)))
		}
	}
	if delta > 0 && n > math.MaxInt64-delta || delta < 0 && n < math.MinInt64-delta {
		return 0, opError("add", key, fmt.Errorf("%w: %d%+d overflows", ErrBadCounter, n, delta))
	}
	n += delta
	m.put(key, strconv.AppendInt(nil, n, 10))
	return n, nil
}

func (m *Memory) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, opError("compareset", key, err)
	}
	if err := checkValue(expected); err != nil {
		return nil, opError("compareset", key, err)
	}
	if err := checkValue(desired); err != nil {
		return nil, opError("compareset", key, err)
	}
	if err := m.lock(ctx); err != nil {
		return nil, opError("compareset", key, err)
	}
	defer m.mu.Unlock()
	cur, ok := m.data[key]
	switch {
	case !ok && len(expected) > 0:
		return nil, nil // nothing stored, and nothing to store
	case ok && !bytes.Equal(cur, expected):
		return clone(cur), nil
	}
	m.put(key, clone(desired))
	return clone(desired), nil
}

func (m *Memory) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, opError("delete", key, err)
	}
	if err := m.lock(ctx); err != nil {
		return false, opError("delete", key, err)
	}
	defer m.mu.Unlock()
	_, ok := m.data[key]
	delete(m.data, key)
	return ok, nil
}

// Close makes every later call fail with ErrClosed and wakes blocked Get and
// Wait calls with ErrClosed. It is idempotent and always returns nil.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		m.data = nil // nothing reads it any more
		close(m.done)
	}
	return nil
}
