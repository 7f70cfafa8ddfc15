package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// connectAll runs connect for w ranks of this process and returns the
// transports' names (or the errors).
func connectAll(t *testing.T, w int, choice string) ([]string, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := store.NewMemory()
	names := make([]string, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for r := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr, err := connect(ctx, st, "sel", launch.Env{Rank: r, WorldSize: w}, choice, func(string) string { return "" })
			errs[r] = err
			if err == nil {
				names[r] = tr.(transport.Namer).Name()
				tr.Close()
			}
		}()
	}
	wg.Wait()
	return names, errs
}

func TestTransportChoice(t *testing.T) {
	for _, c := range []struct{ choice, want string }{{"", "shm"}, {"auto", "shm"}, {"shm", "shm"}, {"tcp", "tcp"}, {"TCP", "tcp"}} {
		names, errs := connectAll(t, 3, strings.ToLower(c.choice))
		for r := range names {
			if errs[r] != nil || names[r] != c.want {
				t.Errorf("choice %q rank %d: %s %v, want %s", c.choice, r, names[r], errs[r], c.want)
			}
		}
	}
	if _, errs := connectAll(t, 2, "udp"); !errors.Is(errs[0], ErrTransport) {
		t.Fatalf("unknown transport: %v", errs[0])
	}
}

// Ranks on different hosts: auto takes TCP on every rank, forced shm fails
// on every rank instead of hanging or splitting.
func TestTransportNotAllLocal(t *testing.T) {
	old := hostIDOf
	hostIDOf = func(rank int) string { return HostID() + "|" + map[bool]string{true: "a", false: "b"}[rank < 1] }
	defer func() { hostIDOf = old }()
	names, errs := connectAll(t, 3, "auto")
	for r := range names {
		if errs[r] != nil || names[r] != "tcp" {
			t.Fatalf("auto across hosts rank %d: %s %v", r, names[r], errs[r])
		}
	}
	_, errs = connectAll(t, 3, "shm")
	for r, err := range errs {
		if !errors.Is(err, ErrTransport) {
			t.Fatalf("forced shm across hosts rank %d: %v", r, err)
		}
	}
}

func TestHostIDStable(t *testing.T) {
	a, b := HostID(), HostID()
	if a != b || !strings.Contains(a, "|") {
		t.Fatalf("HostID %q then %q", a, b)
	}
}
