package launch

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
)

// Under torchrun (or Slurm, Open MPI) rank 0 serves the store on
// MASTER_PORT+1 and every rank dials it.
func TestRendezvousTorchrun(t *testing.T) {
	port := freeTestPort(t)
	const world = 3
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	closed := make([]time.Time, world)  // rank's closer returned
	lastUse := make([]time.Time, world) // rank's last store operation returned
	errs := make([]error, world)
	for rank := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rank == 0 {
				time.Sleep(100 * time.Millisecond) // the others start first and retry
			}
			env, err := FromEnv(getenv(map[string]string{
				"RANK": strconv.Itoa(rank), "WORLD_SIZE": strconv.Itoa(world),
				"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": strconv.Itoa(port - 1), "DETCOLL_TOKEN": "tok",
			}))
			if err != nil {
				errs[rank] = err
				return
			}
			st, closer, err := Rendezvous(ctx, env)
			if err != nil {
				errs[rank] = err
				return
			}
			if _, err := st.Add(ctx, "n", 1); err != nil {
				errs[rank] = err
				return
			}
			if rank == 2 {
				// The last user: rank 0's closer must wait for it.
				time.Sleep(300 * time.Millisecond)
				if err := st.Set(ctx, "late", []byte("x")); err != nil {
					errs[rank] = err
				}
			}
			lastUse[rank] = time.Now()
			errs[rank] = errors.Join(errs[rank], closer())
			closed[rank] = time.Now()
			errs[rank] = errors.Join(errs[rank], closer()) // idempotent
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if closed[0].Before(lastUse[2]) {
		t.Errorf("rank 0 closed the store at %v, before rank 2's last use at %v", closed[0], lastUse[2])
	}
	// The server is gone.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		c.Close()
		t.Errorf("store still listening after rank 0's closer")
	}
}

func TestRendezvousWrongToken(t *testing.T) {
	srv, err := store.Listen("127.0.0.1:0", "right")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = Rendezvous(ctx, Env{Rank: 1, WorldSize: 2, StoreAddr: srv.Addr(), Token: "wrong", Source: SourceDetcoll})
	if !errors.Is(err, store.ErrAuth) {
		t.Fatalf("Rendezvous = %v, want ErrAuth", err)
	}
}

func TestRendezvousDetcollDoesNotServe(t *testing.T) {
	srv, err := store.Listen("127.0.0.1:0", "t")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Rank 0 under the launcher only dials: were it to Listen on the
	// launcher's address it would fail with "address in use".
	st, closer, err := Rendezvous(ctx, Env{Rank: 0, WorldSize: 2, StoreAddr: srv.Addr(), Token: "t", Source: SourceDetcoll})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
	if err := closer(); err != nil {
		t.Fatal(err)
	}
}

func TestRendezvousSingle(t *testing.T) {
	env, err := FromEnv(getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	st, closer, err := Rendezvous(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*store.Memory); !ok {
		t.Errorf("single rank got %T, want *store.Memory", st)
	}
	if n, err := st.Add(context.Background(), "k", 2); n != 2 || err != nil {
		t.Errorf("Add = %d, %v", n, err)
	}
	if err := closer(); err != nil {
		t.Error(err)
	}
	if _, _, err := Rendezvous(context.Background(), Env{WorldSize: 2, Rank: 1}); !errors.Is(err, ErrInvalidEnv) {
		t.Errorf("world 2 without a store: %v", err)
	}
}
