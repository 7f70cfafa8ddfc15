package store_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/store/storetest"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("DETCOLL_STORE_TEST_SERVER"); mode != "" {
		store.RunHelperServer(mode) // TestParkedFloodRSSBounded's server subprocess; never returns
	}
	goleak.VerifyTestMain(m)
}

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return store.NewMemory() })
}

func TestPrefixMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		m := store.NewMemory()
		t.Cleanup(func() { m.Close() })
		return store.Prefix(m, "group/")
	})
}

// serve starts a server with token and closes it when t ends.
func serve(t *testing.T, token string) *store.Server {
	t.Helper()
	srv, err := store.Listen("", token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func dial(t *testing.T, addr, token string) *store.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := store.Dial(ctx, addr, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClient(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return dial(t, serve(t, "tok").Addr(), "tok")
	})
}

func TestPrefixClient(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return store.Prefix(dial(t, serve(t, "").Addr(), ""), "p/")
	})
}

func TestPrefixIsolation(t *testing.T) {
	ctx := context.Background()
	m := store.NewMemory()
	defer m.Close()
	a, b := store.Prefix(m, "a/"), store.Prefix(m, "b/")
	if err := a.Set(ctx, "k", []byte("in a")); err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get(ctx, "a/k"); err != nil || string(v) != "in a" {
		t.Fatalf("underlying Get(a/k) = %q, %v", v, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := b.Get(short, "k"); !errors.Is(err, store.ErrTimeout) {
		t.Fatalf("b sees a's key: %v", err)
	}
	if n, err := store.Prefix(a, "x/").Add(ctx, "n", 1); err != nil || n != 1 {
		t.Fatalf("nested prefix Add = %d, %v", n, err)
	}
	if v, err := m.Get(ctx, "a/x/n"); err != nil || string(v) != "1" {
		t.Fatalf("nested prefix stored %q, %v at a/x/n", v, err)
	}
	// Closing a view leaves the underlying store and other views open.
	a.Close()
	if err := a.Set(ctx, "k", nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Set on a closed view: %v", err)
	}
	if err := b.Set(ctx, "k", []byte("in b")); err != nil {
		t.Fatalf("other view broken by Close: %v", err)
	}
	if v, err := m.Get(ctx, "a/k"); err != nil || string(v) != "in a" {
		t.Fatalf("underlying store broken by view Close: %q, %v", v, err)
	}
}
