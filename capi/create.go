//go:build cgo

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport/tcp"
)

// Environment variables read by communicator creation (besides the
// launcher's, read by package launch, and DETCOLL_TCP_HOST).
const (
	envTimeout     = "DETCOLL_TIMEOUT"
	envInitTimeout = "DETCOLL_INIT_TIMEOUT"
	envAccumulate  = "DETCOLL_ACCUMULATE"
)

const defaultInitTimeout = 5 * time.Minute

// durationEnv reads a positive Go duration.
func durationEnv(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, usageError("%s=%q is not a positive Go duration (like 90s or 5m)", name, v)
	}
	return d, nil
}

// commOptions are the communicator options the environment asks for.
func commOptions(getenv func(string) string) ([]detcoll.CommOption, error) {
	var opts []detcoll.CommOption
	if getenv(envTimeout) != "" {
		d, err := durationEnv(getenv, envTimeout, 0)
		if err != nil {
			return nil, err
		}
		opts = append(opts, detcoll.WithTimeout(d))
	}
	if getenv(envAccumulate) != "" {
		acc, err := accumulateEnv(getenv)
		if err != nil {
			return nil, err
		}
		opts = append(opts, detcoll.WithDefaultAccumulate(acc))
	}
	return opts, nil
}

// accumulateEnv is the accumulate mode DETCOLL_ACCUMULATE asks for (native
// when unset).
func accumulateEnv(getenv func(string) string) (detcoll.Accumulate, error) {
	switch v := getenv(envAccumulate); v {
	case "", "native":
		return detcoll.AccumulateNative, nil
	case "f32", "fp32":
		return detcoll.AccumulateF32, nil
	default:
		return 0, usageError("%s=%q: want native or f32", envAccumulate, v)
	}
}

// origin is what a communicator's creation holds besides the detcoll.Comm:
// what to release when it is destroyed, and what a device backend needs to
// build its own communicator over the same ranks (the rendezvous store, this
// process's place in the job, a store prefix that names the communicator
// alike on every rank, and the accumulate mode fixed at creation).
type origin struct {
	// release frees the store connection; abort means do not wait for
	// peers. Nil when there is nothing to release.
	release func(abort bool) error
	store   store.Store // nil for communicators made in process (tests)
	env     launch.Env
	// prefix names the communicator in the store, the same on every rank
	// and distinct from every other communicator of the store.
	prefix string
	acc    detcoll.Accumulate
	// uid: made by detcollCommInitRank (the GPU is then the calling
	// thread's current CUDA device, if any); false: from the environment
	// (the GPU is LOCAL_RANK's).
	uid bool
}

// envLocal reads this process's local rank and local world size for a
// communicator made from a unique id, which has no launcher environment of
// its own: DETCOLL_LOCAL_RANK, else LOCAL_RANK, else the rank; likewise
// DETCOLL_LOCAL_WORLD_SIZE, LOCAL_WORLD_SIZE, else nranks.
func envLocal(getenv func(string) string, rank, nranks int) (localRank, localWorld int) {
	localRank, localWorld = rank, nranks
	for _, k := range []string{launch.EnvLocalRank, "LOCAL_RANK"} {
		if n, err := strconv.Atoi(getenv(k)); err == nil && n >= 0 {
			localRank = n
			break
		}
	}
	for _, k := range []string{launch.EnvLocalWorldSize, "LOCAL_WORLD_SIZE"} {
		if n, err := strconv.Atoi(getenv(k)); err == nil && n >= 1 {
			localWorld = n
			break
		}
	}
	return localRank, localWorld
}

// shareCPUs gives this library's Go runtime its share of the host's CPUs
// when its collectives go over TCP, more than one rank runs on the host and
// GOMAXPROCS is unset: the host's CPUs / the local world size
// (DETCOLL_LOCAL_WORLD_SIZE, else LOCAL_WORLD_SIZE), at least 1. detcoll's
// launcher sets GOMAXPROCS that way for its TCP jobs (docs/launcher.md,
// "GOMAXPROCS"); torchrun and mpirun do not, and by default every rank's
// runtime would run a thread per CPU of the host, which made TCP
// collectives of 4 KiB – 1 MiB 1.4–4.3× slower on a 2-core host. The
// runtime is this library's own, so the setting touches no thread of the
// host program (PyTorch's included). It is decided once per process, at
// the first communicator.
func shareCPUs(getenv func(string) string, overTCP bool) {
	cpuShare.Do(func() {
		if !overTCP || getenv("GOMAXPROCS") != "" {
			return
		}
		if _, lw := envLocal(getenv, 0, 1); lw > 1 {
			runtime.GOMAXPROCS(max(1, runtime.NumCPU()/lw))
		}
	})
}

// envOverTCP reports whether a communicator from the launch environment
// goes over TCP: forced (DETCOLL_TRANSPORT=tcp), or ranks on other hosts
// (WORLD_SIZE above LOCAL_WORLD_SIZE); otherwise cluster picks shared memory.
func envOverTCP(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(cluster.EnvTransport)), "tcp") {
		return true
	}
	world, err := strconv.Atoi(getenv("WORLD_SIZE"))
	if err != nil {
		world, err = strconv.Atoi(getenv(launch.EnvWorldSize))
	}
	_, local := envLocal(getenv, 0, world)
	return err == nil && world > local
}

var cpuShare sync.Once

// initContext bounds a communicator's creation by DETCOLL_INIT_TIMEOUT.
func initContext(getenv func(string) string) (context.Context, context.CancelFunc, time.Duration, error) {
	d, err := durationEnv(getenv, envInitTimeout, defaultInitTimeout)
	if err != nil {
		return nil, nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	return ctx, cancel, d, nil
}

// ---- unique ids -------------------------------------------------------

const (
	uidMagic      = "DCID"
	uidVersion    = 1
	uidHeader     = 40 // magic, version, addr length, 2 zero bytes, token, key
	uidMaxAddrLen = uniqueIDBytes - uidHeader
)

type uniqueID struct {
	token [16]byte
	key   [16]byte
	addr  string
}

func (u uniqueID) encode() (b [uniqueIDBytes]byte) {
	copy(b[0:4], uidMagic)
	b[4] = uidVersion
	b[5] = byte(len(u.addr))
	copy(b[8:24], u.token[:])
	copy(b[24:40], u.key[:])
	copy(b[uidHeader:], u.addr)
	return b
}

func decodeUniqueID(b [uniqueIDBytes]byte) (uniqueID, error) {
	var u uniqueID
	if string(b[0:4]) != uidMagic {
		return u, argError("commId is not a detcoll unique id (no DCID magic): make it with detcollGetUniqueId")
	}
	if b[4] != uidVersion {
		return u, argError("commId has version %d; this library reads version %d", b[4], uidVersion)
	}
	n := int(b[5])
	if n == 0 || n > uidMaxAddrLen {
		return u, argError("commId is corrupt (address length %d)", n)
	}
	copy(u.token[:], b[8:24])
	copy(u.key[:], b[24:40])
	u.addr = string(b[uidHeader : uidHeader+n])
	if _, _, err := net.SplitHostPort(u.addr); err != nil {
		return u, argError("commId is corrupt (address %q)", u.addr)
	}
	return u, nil
}

// uidStore is the process's rendezvous store for unique ids.
var uidStore struct {
	sync.Mutex
	srv   *store.Server
	token [16]byte
	addr  string
}

// getUniqueID makes a unique id, starting the process's store on first use.
func getUniqueID(getenv func(string) string) ([uniqueIDBytes]byte, error) {
	uidStore.Lock()
	defer uidStore.Unlock()
	if uidStore.srv == nil {
		var tok [16]byte
		rand.Read(tok[:])
		host := getenv(tcp.EnvHost)
		if host == "" {
			host = "127.0.0.1"
		}
		srv, err := store.Listen(net.JoinHostPort(host, "0"), hex.EncodeToString(tok[:]))
		if err != nil {
			return [uniqueIDBytes]byte{}, fmt.Errorf("serving the rendezvous store on %s (%s): %w", host, tcp.EnvHost, err)
		}
		_, port, err := net.SplitHostPort(srv.Addr())
		if err != nil {
			srv.Close()
			return [uniqueIDBytes]byte{}, err
		}
		addr := net.JoinHostPort(host, port)
		if len(addr) > uidMaxAddrLen {
			srv.Close()
			return [uniqueIDBytes]byte{}, usageError("store address %q is longer than the %d bytes a unique id holds (shorten %s)", addr, uidMaxAddrLen, tcp.EnvHost)
		}
		uidStore.srv, uidStore.token, uidStore.addr = srv, tok, addr
	}
	u := uniqueID{token: uidStore.token, addr: uidStore.addr}
	rand.Read(u.key[:])
	return u.encode(), nil
}

// initRank is detcollCommInitRank.
func initRank(ctx context.Context, getenv func(string) string, id [uniqueIDBytes]byte, nranks, rank int) (c *detcoll.Comm, o *origin, err error) {
	shareCPUs(getenv, true) // this path always connects over TCP
	if nranks < 1 {
		return nil, nil, argError("nranks %d is not positive", nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, nil, argError("rank %d is not in [0, %d)", rank, nranks)
	}
	u, err := decodeUniqueID(id)
	if err != nil {
		return nil, nil, err
	}
	opts, err := commOptions(getenv)
	if err != nil {
		return nil, nil, err
	}
	acc, err := accumulateEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	cl, err := store.Dial(ctx, u.addr, hex.EncodeToString(u.token[:]))
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d reaching the rendezvous store of the unique id at %s (is the process that made the id alive?): %w", rank, u.addr, err)
	}
	prefix := "detcoll/uid/" + hex.EncodeToString(u.key[:])
	failedKey := prefix + "/failed"
	// Every failure from here on, whichever step, is published and closes cl.
	defer func() {
		if err != nil {
			publishJoinFailure(cl, failedKey, rank, err)
			cl.Close()
		}
	}()
	if err := claimRank(ctx, cl, prefix, nranks, rank); err != nil {
		return nil, nil, err
	}
	// Stop waiting if another rank fails to join.
	cctx, stopWatch := watchPeerFailure(ctx, cl, failedKey)
	dl, _ := ctx.Deadline()
	// The id's store token authenticates the TCP handshake too.
	t, err := tcp.Connect(cctx, cl, prefix, rank, nranks, tcp.Options{Host: getenv(tcp.EnvHost), DialTimeout: time.Until(dl), Token: hex.EncodeToString(u.token[:])})
	if peerFailure := stopWatch(); peerFailure != nil {
		if t != nil {
			t.Close()
		}
		return nil, nil, coded(rcRemoteError, "another rank failed to join: %s", peerFailure)
	}
	if err != nil {
		return nil, nil, err
	}
	c, err = detcoll.New(t, opts...)
	if err != nil {
		t.Close()
		return nil, nil, err
	}
	lr, lw := envLocal(getenv, rank, nranks)
	return c, &origin{
		release: func(bool) error { return cl.Close() },
		store:   cl,
		env:     launch.Env{Rank: rank, WorldSize: nranks, LocalRank: lr, LocalWorldSize: lw, StoreAddr: u.addr},
		prefix:  prefix,
		acc:     acc,
		uid:     true,
	}, nil
}

// publishJoinFailure tells the other ranks that this one failed to join, so
// they stop waiting for it. A failure that is itself another rank's is not
// echoed back.
func publishJoinFailure(cl *store.Client, failedKey string, rank int, err error) {
	var ce *codedError
	if !errors.As(err, &ce) || ce.code != rcRemoteError {
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cl.Set(pctx, failedKey, []byte(fmt.Sprintf("rank %d: %v", rank, err)))
		cancel()
	}
}

// claimRank checks that every rank of the id was given the same nranks and
// takes rank, which no other caller may have taken.
func claimRank(ctx context.Context, cl *store.Client, prefix string, nranks, rank int) error {
	n := []byte(strconv.Itoa(nranks))
	got, err := cl.CompareSet(ctx, prefix+"/nranks", nil, n)
	if err != nil {
		return err
	}
	if string(got) != string(n) {
		return usageError("rank %d was given nranks=%d, but a rank that joined earlier was given nranks=%s", rank, nranks, got)
	}
	if k, err := cl.Add(ctx, prefix+"/rank/"+strconv.Itoa(rank), 1); err != nil {
		return err
	} else if k != 1 {
		return usageError("rank %d joined twice: two callers of detcollCommInitRank passed the same id and rank", rank)
	}
	return nil
}

// watchPeerFailure returns a child of ctx that is cancelled once some rank
// publishes failedKey. stop ends the watch, waits for it and returns what
// was published (nil when nothing was).
func watchPeerFailure(ctx context.Context, cl *store.Client, failedKey string) (cctx context.Context, stop func() []byte) {
	cctx, cancel := context.WithCancel(ctx)
	var peerFailure []byte
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if v, err := cl.Get(cctx, failedKey); err == nil {
			peerFailure = v
			cancel()
		}
	}()
	return cctx, func() []byte {
		cancel()
		<-watched
		return peerFailure
	}
}

// ---- communicators from the launcher's environment ----------------------

// envJob is the process's place in the launched job, shared by every
// communicator that detcollCommInitFromEnv makes.
var envJob struct {
	sync.Mutex
	job      *cluster.Job
	refs     int  // live communicators over job
	seq      int  // communicators made so far (names their store prefix)
	released bool // the job's store was released; joining again is refused
}

// initFromEnv is detcollCommInitFromEnv.
func initFromEnv(ctx context.Context, getenv func(string) string, initTimeout time.Duration) (*detcoll.Comm, *origin, error) {
	shareCPUs(getenv, envOverTCP(getenv))
	envJob.Lock()
	defer envJob.Unlock()
	if envJob.released {
		return nil, nil, usageError("this process already left its job (its last environment communicator was destroyed); " +
			"a process joins a job once: keep one communicator alive, or use detcollGetUniqueId and detcollCommInitRank")
	}
	opts, err := commOptions(getenv)
	if err != nil {
		return nil, nil, err
	}
	acc, err := accumulateEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	prefix := "detcoll/world"
	if envJob.seq > 0 {
		prefix = fmt.Sprintf("detcoll/world/%d", envJob.seq)
	}
	var c *detcoll.Comm
	if envJob.job == nil {
		job, err := cluster.Init(ctx, cluster.Options{Getenv: getenv, CommOptions: opts, Prefix: prefix})
		if err != nil {
			return nil, nil, err
		}
		envJob.job, c = job, job.Comm
	} else {
		env := envJob.job.Env
		t, err := tcp.Connect(ctx, envJob.job.Store, prefix, env.Rank, env.WorldSize,
			tcp.Options{Host: getenv(tcp.EnvHost), DialTimeout: initTimeout, Token: env.Token})
		if err != nil {
			return nil, nil, fmt.Errorf("rank %d of %d connecting: %w", env.Rank, env.WorldSize, err)
		}
		if c, err = detcoll.New(t, opts...); err != nil {
			t.Close()
			return nil, nil, err
		}
	}
	o := &origin{store: envJob.job.Store, env: envJob.job.Env, prefix: prefix, acc: acc}
	envJob.seq++
	envJob.refs++
	var once sync.Once
	release := func(abort bool) (err error) {
		once.Do(func() {
			envJob.Lock()
			defer envJob.Unlock()
			envJob.refs--
			if envJob.refs > 0 {
				return
			}
			job := envJob.job
			envJob.job = nil
			// A job whose store the detcoll launcher serves can be joined
			// again (its keys outlive us and prefixes keep counting), as can
			// a world of one; a job whose store rank 0 serves cannot (the
			// other ranks may still be dialing the old store).
			envJob.released = job.Env.Source != launch.SourceDetcoll && job.Env.Source != launch.SourceSingle
			if abort {
				go job.Close() // rank 0 may wait for the others: do not block an abort
				return
			}
			err = job.Close()
		})
		return err
	}
	o.release = release
	return c, o, nil
}

// ---- communicators from a caller's store (detcollCommInitStore) ---------

// initStore is detcollCommInitStore: ranks meet under prefix in st, the
// caller's store, and connect a TCP mesh. timeout, when positive, bounds
// every collective (and the creation, unless DETCOLL_INIT_TIMEOUT is set);
// zero leaves DETCOLL_TIMEOUT or the default.
func initStore(getenv func(string) string, st store.Store, prefix string, nranks, rank int, timeout time.Duration) (c *detcoll.Comm, o *origin, err error) {
	shareCPUs(getenv, true) // this path always connects over TCP
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if nranks < 1 {
		return nil, nil, argError("nranks %d is not positive", nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, nil, argError("rank %d is not in [0, %d)", rank, nranks)
	}
	if prefix == "" {
		return nil, nil, argError("prefix is empty (it names the communicator in the store)")
	}
	opts, err := commOptions(getenv)
	if err != nil {
		return nil, nil, err
	}
	if timeout > 0 {
		opts = append(opts, detcoll.WithTimeout(timeout))
	}
	acc, err := accumulateEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	initTimeout := defaultInitTimeout
	if timeout > 0 {
		initTimeout = timeout
	}
	if initTimeout, err = durationEnv(getenv, envInitTimeout, initTimeout); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), initTimeout)
	defer cancel()
	// Ranks that disagree on nranks would wait for each other's addresses
	// until the timeout: check first, through one counter per rank count.
	n, err := st.Add(ctx, prefix+"/nranks/"+strconv.Itoa(nranks), 1)
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d of %d joining under %q: %w", rank, nranks, prefix, err)
	}
	if n > int64(nranks) {
		return nil, nil, usageError("rank %d: more than nranks=%d ranks joined under %q (two callers with the same rank, or a prefix used twice)", rank, nranks, prefix)
	}
	t, err := tcp.Connect(ctx, st, prefix, rank, nranks, tcp.Options{Host: getenv(tcp.EnvHost), DialTimeout: initTimeout})
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d of %d connecting under %q: %w", rank, nranks, prefix, err)
	}
	if c, err = detcoll.New(t, opts...); err != nil {
		t.Close()
		return nil, nil, err
	}
	lr, lw := envLocal(getenv, rank, nranks)
	return c, &origin{
		release: func(bool) error { return st.Close() },
		store:   st,
		env:     launch.Env{Rank: rank, WorldSize: nranks, LocalRank: lr, LocalWorldSize: lw},
		prefix:  prefix,
		acc:     acc,
		uid:     true, // the GPU of device calls: the caller's current device, as for unique ids
	}, nil
}
