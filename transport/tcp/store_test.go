package tcp

import (
	"bytes"
	"context"
	"strconv"
	"sync"
)

// memStore is a tiny in-test stand-in for store.NewMemory() with the same
// method set as store.Store.
type memStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	changed chan struct{} // closed and replaced on every change
}

func newMemStore() *memStore {
	return &memStore{m: map[string][]byte{}, changed: make(chan struct{})}
}

func (s *memStore) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *memStore) Set(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = bytes.Clone(value)
	s.notifyLocked()
	return nil
}

func (s *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		s.mu.Lock()
		v, ok := s.m[key]
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return bytes.Clone(v), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *memStore) Wait(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if _, err := s.Get(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := strconv.ParseInt(string(s.m[key]), 10, 64)
	n += delta
	s.m[key] = []byte(strconv.FormatInt(n, 10))
	s.notifyLocked()
	return n, nil
}

func (s *memStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if (!ok && len(expected) == 0) || (ok && bytes.Equal(v, expected)) {
		s.m[key] = bytes.Clone(desired)
		s.notifyLocked()
		return bytes.Clone(desired), nil
	}
	return bytes.Clone(v), nil
}

func (s *memStore) Delete(ctx context.Context, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	delete(s.m, key)
	return ok, nil
}

func (s *memStore) Close() error { return nil }

// keys lists the keys written so far.
func (s *memStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []string
	for k := range s.m {
		ks = append(ks, k)
	}
	return ks
}
