// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
)

const (
	short = 50 * time.Millisecond // how long an expected timeout or non-event takes
	bound = 5 * time.Second       // how long an expected event may take
)

// Run runs the suite. newStore returns a fresh, empty store for each
// subtest; Run closes it when the subtest ends, so Close must be idempotent.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		f    func(*testing.T, store.Store)
	}{
		{"SetGet", testSetGet},
		{"Copies", testCopies},
		{"GetBlocksUntilSet", testGetBlocks},
		{"ManyBlockedGets", testManyBlockedGets},
		{"Wait", testWait},
		{"Add", testAdd},
		{"AddConcurrent", testAddConcurrent},
		{"CompareSet", testCompareSet},
		{"CompareSetConcurrent", testCompareSetConcurrent},
		{"Delete", testDelete},
		{"Cancel", testCancel},
		{"Limits", testLimits},
		{"ErrorNamesOpAndKey", testErrorNames},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { s.Close() })
			tc.f(t, s)
		})
	}
}

// ctxFor is the context for calls expected to succeed.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	t.Cleanup(cancel)
	return ctx
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), short)
	t.Cleanup(cancel)
	return ctx
}

func set(t *testing.T, s store.Store, key, value string) {
	t.Helper()
	if err := s.Set(ctxFor(t), key, []byte(value)); err != nil {
		t.Fatalf("Set(%.80q): %v", key, err)
	}
}

func get(t *testing.T, s store.Store, key string) []byte {
	t.Helper()
	v, err := s.Get(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Get(%.80q): %v", key, err)
	}
	return v
}

// missing asserts that key does not exist: a Get times out.
func missing(t *testing.T, s store.Store, key string) {
	t.Helper()
	if v, err := s.Get(shortCtx(t), key); !errors.Is(err, store.ErrTimeout) {
		t.Fatalf("Get(%.80q) of a missing key = %.80q, %v; want ErrTimeout", key, v, err)
	}
}

// isTimeout asserts err is the error of a call whose ctx ended with cause.
func isTimeout(t *testing.T, err, cause error) {
	t.Helper()
	if !errors.Is(err, store.ErrTimeout) || !errors.Is(err, cause) {
		t.Fatalf("err = %v; want ErrTimeout wrapping %v", err, cause)
	}
}

// async runs f in a goroutine; the channel yields its error once.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func notYet(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(short):
	}
}

func within(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(bound):
		t.Fatalf("%s still blocked after %v", what, bound)
		return nil
	}
}

func testSetGet(t *testing.T, s store.Store) {
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(255 - i)
	}
	cases := []struct {
		key   string
		value []byte
	}{
		{"binary", bin},
		{"empty", []byte{}},
		{"nil", nil},
		{"\x00bin\xffkey", []byte("v")},
		{"", []byte("empty key")},
	}
	for _, c := range cases {
		if err := s.Set(ctxFor(t), c.key, c.value); err != nil {
			t.Fatalf("Set(%q): %v", c.key, err)
		}
	}
	for _, c := range cases {
		got := get(t, s, c.key)
		if !bytes.Equal(got, c.value) || got == nil {
			t.Errorf("Get(%q) = %#v; want %#v (non-nil)", c.key, got, c.value)
		}
	}
	set(t, s, "k", "first")
	set(t, s, "k", "second")
	if got := get(t, s, "k"); string(got) != "second" {
		t.Errorf("Get after overwrite = %q; want second", got)
	}
}

func testCopies(t *testing.T, s store.Store) {
	v := []byte("abc")
	if err := s.Set(ctxFor(t), "k", v); err != nil {
		t.Fatal(err)
	}
	v[0] = 'X'
	got := get(t, s, "k")
	if string(got) != "abc" {
		t.Fatalf("store kept the caller's slice: %q", got)
	}
	got[0] = 'Y'
	if got := get(t, s, "k"); string(got) != "abc" {
		t.Fatalf("Get returned the store's own slice: %q", got)
	}
}

func testGetBlocks(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	var got []byte
	done := async(func() (err error) { got, err = s.Get(ctx, "late"); return err })
	notYet(t, done, "Get of a missing key")
	set(t, s, "late", "here")
	if err := within(t, done, "Get after Set"); err != nil || string(got) != "here" {
		t.Fatalf("Get = %q, %v; want here", got, err)
	}
}

// testManyBlockedGets checks that concurrent blocked calls each get their
// own answer (a Client multiplexes them over one connection).
func testManyBlockedGets(t *testing.T, s store.Store) {
	const n = 16
	ctx := ctxFor(t)
	got := make([][]byte, n)
	dones := make([]<-chan error, n)
	for i := range n {
		dones[i] = async(func() (err error) { got[i], err = s.Get(ctx, fmt.Sprint("k", i)); return err })
	}
	notYet(t, dones[0], "Get of a missing key")
	for i := n - 1; i >= 0; i-- {
		set(t, s, fmt.Sprint("k", i), fmt.Sprint("v", i))
	}
	for i := range n {
		if err := within(t, dones[i], "Get"); err != nil || string(got[i]) != fmt.Sprint("v", i) {
			t.Errorf("Get(k%d) = %q, %v; want v%d", i, got[i], err, i)
		}
	}
}

func testWait(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("Wait() with no keys: %v", err)
	}
	set(t, s, "a", "1")
	if err := s.Wait(ctx, "a"); err != nil {
		t.Fatalf("Wait for an existing key: %v", err)
	}

	start := time.Now()
	err := s.Wait(shortCtx(t), "a", "b", "c")
	isTimeout(t, err, context.DeadlineExceeded)
	if d := time.Since(start); d > bound {
		t.Fatalf("Wait took %v past a %v deadline", d, short)
	}
	var oe *store.OpError
	if !errors.As(err, &oe) || oe.Op != "wait" {
		t.Fatalf("Wait error %v is not an OpError for wait", err)
	}

	done := async(func() error { return s.Wait(ctx, "a", "b", "c") })
	notYet(t, done, "Wait with two keys missing")
	set(t, s, "c", "3")
	notYet(t, done, "Wait with one key missing")
	set(t, s, "b", "2")
	if err := within(t, done, "Wait after all keys set"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func testAdd(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	for _, step := range []struct{ delta, want int64 }{{5, 5}, {-7, -2}, {0, -2}} {
		if n, err := s.Add(ctx, "ctr", step.delta); err != nil || n != step.want {
			t.Fatalf("Add(%d) = %d, %v; want %d", step.delta, n, err, step.want)
		}
	}
	if got := get(t, s, "ctr"); string(got) != "-2" {
		t.Fatalf("counter stored as %q; want decimal ASCII -2", got)
	}
	set(t, s, "seeded", "40")
	if n, err := s.Add(ctx, "seeded", 2); err != nil || n != 42 {
		t.Fatalf("Add to a Set counter = %d, %v; want 42", n, err)
	}

	set(t, s, "text", "abc")
	if _, err := s.Add(ctx, "text", 1); !errors.Is(err, store.ErrBadCounter) {
		t.Fatalf("Add to a non-numeric value: %v; want ErrBadCounter", err)
	}
	if got := get(t, s, "text"); string(got) != "abc" {
		t.Fatalf("failed Add changed the value to %q", got)
	}
	set(t, s, "max", strconv.FormatInt(math.MaxInt64, 10))
	if _, err := s.Add(ctx, "max", 1); !errors.Is(err, store.ErrBadCounter) {
		t.Fatalf("overflowing Add: %v; want ErrBadCounter", err)
	}
}

func testAddConcurrent(t *testing.T, s store.Store) {
	const workers, adds = 8, 50
	ctx := ctxFor(t)
	results := make(chan int64, workers*adds)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range adds {
				n, err := s.Add(ctx, "ctr", 1)
				if err != nil {
					t.Error(err)
					return
				}
				results <- n
			}
		})
	}
	wg.Wait()
	close(results)
	// Atomic increments hand out each of 1..total exactly once.
	seen := make(map[int64]bool)
	for n := range results {
		if n < 1 || n > workers*adds || seen[n] {
			t.Fatalf("Add returned %d twice or out of range", n)
		}
		seen[n] = true
	}
	if len(seen) != workers*adds {
		t.Fatalf("%d results; want %d", len(seen), workers*adds)
	}
	if got := get(t, s, "ctr"); string(got) != strconv.Itoa(workers*adds) {
		t.Fatalf("final counter %q; want %d", got, workers*adds)
	}
}

func testCompareSet(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	cas := func(key string, expected, desired []byte, want []byte) {
		t.Helper()
		got, err := s.CompareSet(ctx, key, expected, desired)
		if err != nil || !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("CompareSet(%q, %q, %q) = %#v, %v; want %#v", key, expected, desired, got, err, want)
		}
	}
	// Missing key, non-empty expected: nothing happens, nil comes back.
	cas("k", []byte("x"), []byte("y"), nil)
	missing(t, s, "k")
	// Missing key, nil expected: desired is stored.
	cas("k", nil, []byte("v1"), []byte("v1"))
	// Match.
	cas("k", []byte("v1"), []byte("v2"), []byte("v2"))
	// Mismatch: the current value comes back, unchanged.
	cas("k", []byte("v1"), []byte("v3"), []byte("v2"))
	if got := get(t, s, "k"); string(got) != "v2" {
		t.Fatalf("after mismatch the value is %q; want v2", got)
	}
	// An empty stored value matches a nil expected, and empty can be stored.
	cas("e", []byte{}, []byte{}, []byte{})
	if got := get(t, s, "e"); got == nil || len(got) != 0 {
		t.Fatalf("Get of an empty CompareSet value = %#v", got)
	}
	cas("e", nil, []byte("full"), []byte("full"))
}

func testCompareSetConcurrent(t *testing.T, s store.Store) {
	const n = 8
	ctx := ctxFor(t)
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var err error
			if got[i], err = s.CompareSet(ctx, "leader", nil, []byte{byte(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if len(got[i]) != 1 || got[i][0] != got[0][0] {
			t.Fatalf("CompareSet results disagree: %v", got)
		}
		if got[i][0] == byte(i) {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d CompareSet winners; want 1", winners)
	}
}

func testDelete(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	del := func(key string, want bool) {
		t.Helper()
		if ok, err := s.Delete(ctx, key); err != nil || ok != want {
			t.Fatalf("Delete(%q) = %v, %v; want %v", key, ok, err, want)
		}
	}
	del("k", false)
	set(t, s, "k", "v")
	del("k", true)
	del("k", false)
	missing(t, s, "k")
	if n, err := s.Add(ctx, "k", 3); err != nil || n != 3 {
		t.Fatalf("Add after Delete = %d, %v; want 3", n, err)
	}
	// A Get blocked on a deleted key wakes when it is set again.
	del("k", true)
	var got []byte
	done := async(func() (err error) { got, err = s.Get(ctx, "k"); return err })
	notYet(t, done, "Get of a deleted key")
	set(t, s, "k", "again")
	if err := within(t, done, "Get after Set"); err != nil || string(got) != "again" {
		t.Fatalf("Get = %q, %v; want again", got, err)
	}
}

func testCancel(t *testing.T, s store.Store) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Get(cancelled, "k")
	isTimeout(t, err, context.Canceled)
	set(t, s, "k", "v")
	_, err = s.Get(cancelled, "k")
	isTimeout(t, err, context.Canceled) // a done ctx fails even a call that could succeed at once
	isTimeout(t, s.Set(cancelled, "unset", []byte("v")), context.Canceled)
	missing(t, s, "unset")

	// Cancelling a blocked Get returns promptly and leaves the store usable.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := async(func() error { _, err := s.Get(ctx, "never"); return err })
	notYet(t, done, "Get of a missing key")
	cancel()
	isTimeout(t, within(t, done, "cancelled Get"), context.Canceled)

	// Many abandoned waits must not wedge anything.
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err := s.Wait(ctx, "never", "k")
		cancel()
		isTimeout(t, err, context.DeadlineExceeded)
	}
	set(t, s, "after", "ok")
	if got := get(t, s, "after"); string(got) != "ok" {
		t.Fatalf("store unusable after cancellations: %q", got)
	}
}

func testLimits(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	bigKey := strings.Repeat("k", store.MaxKeyLen+1)
	bigValue := make([]byte, store.MaxValueLen+1)
	calls := map[string]error{
		"Set(big key)":             s.Set(ctx, bigKey, nil),
		"Set(big value)":           s.Set(ctx, "k", bigValue),
		"Get(big key)":             func() error { _, err := s.Get(ctx, bigKey); return err }(),
		"Wait(big key)":            s.Wait(ctx, "k", bigKey),
		"Add(big key)":             func() error { _, err := s.Add(ctx, bigKey, 1); return err }(),
		"CompareSet(big expected)": func() error { _, err := s.CompareSet(ctx, "k", bigValue, nil); return err }(),
		"CompareSet(big desired)":  func() error { _, err := s.CompareSet(ctx, "k", nil, bigValue); return err }(),
		"Delete(big key)":          func() error { _, err := s.Delete(ctx, bigKey); return err }(),
	}
	for name, err := range calls {
		if !errors.Is(err, store.ErrProtocol) {
			t.Errorf("%s: %v; want ErrProtocol", name, err)
		}
	}
	missing(t, s, "k")
	// A key near the limit works (a Prefix view needs room for its prefix),
	// and the rejected requests did not break the store.
	maxKey := strings.Repeat("m", store.MaxKeyLen-64)
	set(t, s, maxKey, "v")
	if got := get(t, s, maxKey); string(got) != "v" {
		t.Fatalf("Get(long key) = %q", got)
	}
}

func testErrorNames(t *testing.T, s store.Store) {
	_, err := s.Get(shortCtx(t), "some-key")
	var oe *store.OpError
	if !errors.As(err, &oe) || oe.Op != "get" || !strings.HasSuffix(oe.Key, "some-key") {
		t.Fatalf("Get error %#v does not name op get and key some-key", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "get") || !strings.Contains(msg, "some-key") {
		t.Fatalf("error text %q does not name op and key", msg)
	}
}

func testClose(t *testing.T, s store.Store) {
	ctx := ctxFor(t)
	set(t, s, "k", "v")
	done := async(func() error { _, err := s.Get(ctx, "never"); return err })
	notYet(t, done, "Get of a missing key")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := within(t, done, "Get blocked across Close"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("blocked Get woken by Close: %v; want ErrClosed", err)
	}
	calls := map[string]error{
		"Set":        s.Set(ctx, "k", nil),
		"Get":        func() error { _, err := s.Get(ctx, "k"); return err }(),
		"Wait":       s.Wait(ctx, "k"),
		"Add":        func() error { _, err := s.Add(ctx, "n", 1); return err }(),
		"CompareSet": func() error { _, err := s.CompareSet(ctx, "k", nil, nil); return err }(),
		"Delete":     func() error { _, err := s.Delete(ctx, "k"); return err }(),
	}
	for name, err := range calls {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v; want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
