// Package cluster turns a process started by `detcoll launch`, torchrun,
// Slurm or Open MPI into a rank of a detcoll communicator: it reads the
// environment (launch.FromEnv), meets the other ranks through the rendezvous
// store (launch.Rendezvous) and connects them over shared memory
// (transport/shm) when every rank is on this host, over TCP (transport/tcp)
// otherwise.
//
// Transport choice: DETCOLL_TRANSPORT (or Options.Transport) is "auto" (the
// default), "shm" or "tcp". Under auto every rank publishes its HostID
// (host name, boot id, the /dev/shm file system and the pid namespace) under
// prefix+"/host/<rank>" and reads all of them; when all are equal the ranks
// connect over shm, and if any rank cannot set the segment up (every rank
// learns it together, shm.ErrUnavailable) all of them use TCP. "shm" fails
// instead of falling back; "tcp" skips the host check. docs/shm.md has the
// measurements behind the default.
//
// Environment: see package launch for the rank variables and the store
// address rule (detcoll's store never takes torch's MASTER_PORT), and
// package transport/tcp for DETCOLL_TCP_HOST, the address this rank listens
// on and advertises (default 127.0.0.1; `detcoll launch` sets it to the
// address of the host that routes to the master, see docs/launcher.md). DETCOLL_TIMEOUT (a Go duration, default 5m)
// bounds every collective whose context has no deadline.
package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// Job is this process's place in a launched job.
type Job struct {
	Env   launch.Env
	Store store.Store
	Comm  *detcoll.Comm

	closeStore func() error
}

// Options configure Init.
type Options struct {
	// Getenv reads the environment (default os.Getenv).
	Getenv func(string) string
	// Comm options for the world communicator.
	CommOptions []detcoll.CommOption
	// WrapTransport, when set, wraps the transport before the
	// communicator takes it (tests inject faults this way).
	WrapTransport func(transport.Transport) transport.Transport
	// Prefix namespaces the store keys of the world communicator (default
	// "detcoll/world"): two communicators in one job need different prefixes.
	Prefix string
	// Transport is "auto", "shm" or "tcp"; empty means $DETCOLL_TRANSPORT,
	// and "auto" when that is unset too. See the package doc.
	Transport string
}

// Init joins the job described by the environment. ctx bounds the
// rendezvous (give it a deadline: peers that never arrive otherwise wait).
func Init(ctx context.Context, opt Options) (*Job, error) {
	getenv := opt.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	env, err := launch.FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	st, closer, err := launch.Rendezvous(ctx, env)
	if err != nil {
		return nil, err
	}
	prefix := opt.Prefix
	if prefix == "" {
		prefix = "detcoll/world"
	}
	t, err := connect(ctx, st, prefix, env, opt.Transport, getenv)
	if err != nil {
		closer()
		return nil, fmt.Errorf("cluster: rank %d of %d connecting: %w", env.Rank, env.WorldSize, err)
	}
	var tr transport.Transport = t
	if opt.WrapTransport != nil {
		tr = opt.WrapTransport(t)
	}
	copts := opt.CommOptions
	if v := getenv("DETCOLL_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Close()
			closer()
			return nil, fmt.Errorf("cluster: DETCOLL_TIMEOUT=%q is not a positive duration", v)
		}
		copts = append([]detcoll.CommOption{detcoll.WithTimeout(d)}, copts...)
	}
	c, err := detcoll.New(tr, copts...)
	if err != nil {
		t.Close()
		closer()
		return nil, err
	}
	return &Job{Env: env, Store: st, Comm: c, closeStore: closer}, nil
}

// Close closes the communicator and releases the store (rank 0 serving the
// store waits for the other ranks to release theirs first).
func (j *Job) Close() error {
	err := j.Comm.Close()
	if cerr := j.closeStore(); err == nil {
		err = cerr
	}
	return err
}
