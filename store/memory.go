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
	used   int64               // bytes of keys and values in data
	limit  int64               // cap on used; 0: none (a Server sets it from MaxBytes)
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

// fits reports ErrLimit when storing n value bytes under key would take
// the store over its byte cap. m.mu held.
func (m *Memory) fits(key string, n int) error {
	if m.limit <= 0 {
		return nil
	}
	old, ok := m.data[key]
	used := m.used + int64(n) - int64(len(old))
	if !ok {
		used += int64(len(key))
	}
	if used > m.limit {
		return fmt.Errorf("%w: storing %d bytes under a %d-byte key would take the store over its cap of %d bytes (%d in use)",
			ErrLimit, n, len(key), m.limit, m.used)
	}
	return nil
}

// put stores v (which the store now owns) and wakes key's waiters. m.mu held.
func (m *Memory) put(key string, v []byte) {
	if old, ok := m.data[key]; ok {
		m.used -= int64(len(old))
	} else {
		m.used += int64(len(key))
	}
	m.used += int64(len(v))
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
	if err := m.fits(key, len(value)); err != nil {
		return opError("set", key, err)
	}
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
	v := strconv.AppendInt(nil, n, 10)
	if err := m.fits(key, len(v)); err != nil {
		return 0, opError("add", key, err)
	}
	m.put(key, v)
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
	if err := m.fits(key, len(desired)); err != nil {
		return nil, opError("compareset", key, err)
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
	v, ok := m.data[key]
	if ok {
		m.used -= int64(len(key) + len(v))
	}
	delete(m.data, key)
	return ok, nil
}

// peek returns, without blocking, the value of keys[0] if every key exists
// now. A Server answers a Get or Wait this way before it parks one.
func (m *Memory) peek(keys []string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, false, ErrClosed
	}
	for _, k := range keys {
		if _, ok := m.data[k]; !ok {
			return nil, false, nil
		}
	}
	if len(keys) == 0 {
		return nil, true, nil
	}
	return clone(m.data[keys[0]]), true, nil
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
