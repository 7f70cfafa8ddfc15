package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/detcoll/detcoll/store"
)

// CloseTimeout bounds how long the closer of a rank 0 that serves the store
// waits for the other ranks to close theirs.
const CloseTimeout = time.Minute

// Keys used by Rendezvous's shutdown barrier.
const (
	closedKey    = "detcoll/rendezvous/closed"
	allClosedKey = "detcoll/rendezvous/all_closed"
)

// Rendezvous connects this process to its job's store as described by env
// (normally from FromEnv): rank 0 serves the store when no detcoll launcher
// does (env.ServesStore), and every rank dials it. Dialing retries until ctx
// ends, so give ctx a deadline. A single-rank env without a store address
// gets a fresh in-memory store.
//
// closer releases the store; every rank should call it at the end (later
// calls return the first call's result). A serving rank 0's closer waits (up to CloseTimeout) until every rank
// has called its closer before shutting the server down, so ranks that are
// still using the store are not cut off.
func Rendezvous(ctx context.Context, env Env) (st store.Store, closer func() error, err error) {
	if env.StoreAddr == "" {
		if env.WorldSize > 1 {
			return nil, nil, fmt.Errorf("launch: %w: world size %d needs a store address", ErrInvalidEnv, env.WorldSize)
		}
		m := store.NewMemory()
		return m, m.Close, nil
	}
	var srv *store.Server
	dialAddr := env.StoreAddr
	if env.ServesStore() {
		host, port, err := net.SplitHostPort(env.StoreAddr)
		if err != nil {
			return nil, nil, fmt.Errorf("launch: %w: store address %q: %v", ErrInvalidEnv, env.StoreAddr, err)
		}
		// The advertised name may not be bindable here (NAT, a service
		// name): listen on every interface unless it is a loopback one.
		if !isLoopback(host) {
			host = "0.0.0.0"
		}
		if srv, err = store.Listen(net.JoinHostPort(host, port), env.Token); err != nil {
			return nil, nil, fmt.Errorf("launch: rank 0 serving the store on %s: %w", env.StoreAddr, err)
		}
		dialAddr = dialable(srv.Addr())
	}
	cl, err := store.Dial(ctx, dialAddr, env.Token)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, fmt.Errorf("launch: rank %d reaching the store at %s: %w", env.Rank, dialAddr, err)
	}
	if srv == nil && env.Source == SourceDetcoll {
		return cl, cl.Close, nil // the launcher's store outlives every rank
	}
	return cl, onceErr(func() error {
		wait := storeTimeout
		if srv != nil {
			wait = CloseTimeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		err := closeBarrier(ctx, cl, env.WorldSize, srv != nil)
		err = errors.Join(err, cl.Close())
		if srv != nil {
			err = errors.Join(err, srv.Close())
		}
		return err
	}), nil
}

// onceErr runs f on the first call and returns its result on every call.
func onceErr(f func() error) func() error {
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { err = f() })
		return err
	}
}

// closeBarrier counts this rank as closed; the last rank marks all closed,
// and the serving rank (wait) waits for that mark.
func closeBarrier(ctx context.Context, st store.Store, world int, wait bool) error {
	n, err := st.Add(ctx, closedKey, 1)
	if err == nil && n >= int64(world) {
		err = st.Set(ctx, allClosedKey, nil)
		if err != nil && !wait {
			// The Set may take effect and the serving rank shut the
			// server down before the reply reaches this rank: this rank is
			// done with the store either way, and a server that is gone
			// has nobody waiting on it.
			err = nil
		}
	}
	if err == nil && wait {
		err = st.Wait(ctx, allClosedKey)
	}
	if err != nil {
		return fmt.Errorf("launch: store shutdown barrier: %w", err)
	}
	return nil
}
