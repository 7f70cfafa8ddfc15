package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/detcoll/detcoll/store"
)

// drainTimeout bounds how long Run keeps reading a worker's output after the
// worker exited (a child of the worker may still hold its stdout).
const drainTimeout = 2 * time.Second

// worker is one started process.
type worker struct {
	rank, localRank int
	cmd             *exec.Cmd
	out             tail
	pipes           []*os.File    // read ends of stdout and stderr
	drained         chan struct{} // closed when both pumps returned
	exited          bool          // reaped; touched by the event loop only
}

// exitEvent reports a reaped worker.
type exitEvent struct {
	w     *worker
	state *os.ProcessState
}

func (ev exitEvent) failed() bool { return ev.state == nil || !ev.state.Success() }

// Run starts cfg.NprocPerNode workers on this node, supervises them and
// returns once all have exited. See the package doc for the contract.
func Run(ctx context.Context, cfg Config) error {
	c, err := cfg.normalize()
	if err != nil {
		return err
	}
	j := &job{cfg: c, world: c.Nnodes * c.NprocPerNode, token: c.Token}
	return j.run(ctx)
}

type job struct {
	cfg       Config
	world     int
	token     string
	storeAddr string // given to workers
	torchAddr string // MASTER_ADDR given to workers
	torchPort int    // MASTER_PORT given to workers
	server    *store.Server
	nodes     *nodes // coordination with other nodes; nil on a single node
	stdout    *lineWriter
	stderr    *lineWriter
	workers   []*worker
}

func (j *job) run(ctx context.Context) (err error) {
	c := &j.cfg
	if ctx.Err() != nil {
		return &InterruptedError{Err: ctx.Err()}
	}
	if j.token == "" && c.Nnodes == 1 {
		j.token = randomToken()
	}
	if c.NodeRank == 0 {
		if err := j.serve(); err != nil {
			return err
		}
		defer func() {
			if cerr := j.server.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("launch: closing the store: %w", cerr)
			}
		}()
	} else {
		j.storeAddr = net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
		j.torchAddr = c.MasterAddr
	}
	if c.Nnodes > 1 {
		n, err := j.join(ctx)
		if err != nil {
			return err
		}
		j.nodes = n
		defer n.close()
	}
	j.stdout, j.stderr = destinations(c.Stdout, c.Stderr)
	return j.supervise(ctx)
}

// serve starts node 0's store and picks the torch port.
func (j *job) serve() error {
	c := &j.cfg
	loopback := c.Standalone || isLoopback(c.MasterAddr)
	bindHost := "0.0.0.0"
	if loopback {
		bindHost = c.MasterAddr
	}
	srv, err := store.Listen(net.JoinHostPort(bindHost, strconv.Itoa(c.MasterPort)), j.token)
	if err != nil {
		return fmt.Errorf("launch: starting the store: %w", err)
	}
	_, portStr, _ := net.SplitHostPort(srv.Addr())
	storePort, _ := strconv.Atoi(portStr)
	torchPort, err := freePort(bindHost, storePort)
	if err != nil {
		srv.Close()
		return fmt.Errorf("launch: picking a port for torch: %w", err)
	}
	j.server = srv
	j.storeAddr = net.JoinHostPort(c.MasterAddr, portStr)
	j.torchAddr, j.torchPort = c.MasterAddr, torchPort
	return nil
}

// freePort asks the kernel for a free TCP port on host, other than avoid.
func freePort(host string, avoid int) (int, error) {
	for range 16 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port != avoid {
			return port, nil
		}
	}
	return 0, errors.New("no free port")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// supervise starts the workers and runs the event loop until all exited.
func (j *job) supervise(ctx context.Context) error {
	c := &j.cfg
	exits := make(chan exitEvent, c.NprocPerNode)

	// Start the workers from a goroutine locked to its OS thread for as
	// long as Run runs: Pdeathsig fires when the starting thread exits.
	type startResult struct {
		n   int
		err error
	}
	started := make(chan startResult, 1)
	release := make(chan struct{})
	defer close(release)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		n, err := j.startAll()
		started <- startResult{n, err}
		<-release
	}()
	res := <-started
	for _, w := range j.workers {
		go func() {
			_ = w.cmd.Wait() // the status is in ProcessState
			exits <- exitEvent{w: w, state: w.cmd.ProcessState}
		}()
	}

	var (
		cause      error   // why the job stopped, if it did
		failed     *worker // the local root cause, if any
		failState  *os.ProcessState
		published  chan error // result of publishing a local failure to other nodes
		stopping   bool
		killed     bool
		killTimer  <-chan time.Time
		running    = res.n
		ctxDone    = ctx.Done()
		sigs       = c.Signals
		remote     <-chan nodeEvent
		publishRec = func(rec abortRecord) {
			if j.nodes != nil {
				published = make(chan error, 1)
				go func() { published <- j.nodes.publish(rec) }()
			}
		}
	)
	if j.nodes != nil {
		remote = j.nodes.events
	}
	stop := func(sig os.Signal) {
		for _, w := range j.workers {
			if !w.exited {
				_ = signalGroup(w.cmd.Process, sig)
			}
		}
		if killTimer == nil && !killed {
			killTimer = time.After(c.GracePeriod)
		}
		stopping = true
	}
	if res.err != nil {
		cause = res.err
		publishRec(abortRecord{Node: c.NodeRank, Reason: res.err.Error()})
		stop(sigTerm)
	}
	for running > 0 {
		select {
		case ev := <-exits:
			running--
			ev.w.exited = true
			if !stopping && ev.failed() {
				failed, failState = ev.w, ev.state
				stop(sigTerm)
				if j.nodes != nil {
					w, st := failed, failState
					published = make(chan error, 1)
					go func() {
						j.awaitDrain(w, time.Now().Add(drainTimeout))
						published <- j.nodes.publish(abortRecord{Node: c.NodeRank, Worker: j.workerError(w, st)})
					}()
				}
			}
		case s, ok := <-sigs:
			if !ok {
				sigs = nil // closed: no more signals
				continue
			}
			if !stopping {
				cause = &InterruptedError{Signal: s}
				publishRec(abortRecord{Node: c.NodeRank, Reason: "interrupted by signal " + s.String()})
			}
			stop(s)
		case <-ctxDone:
			ctxDone = nil
			if !stopping {
				cause = &InterruptedError{Err: ctx.Err()}
				publishRec(abortRecord{Node: c.NodeRank, Reason: "interrupted: " + ctx.Err().Error()})
				stop(sigTerm)
			}
		case ev := <-remote:
			if !stopping && (ev.lost != nil || ev.rec.Node != c.NodeRank) {
				cause = ev.err()
				stop(sigTerm)
			}
		case <-killTimer:
			killTimer, killed = nil, true
			stop(sigKill)
		}
	}

	j.drainAll()
	if failed != nil {
		cause = j.workerError(failed, failState)
	}
	if published != nil {
		if err := <-published; err != nil {
			cause = err // another node failed first: report its root cause
		}
	}
	if j.nodes != nil {
		cause = j.nodes.finish(ctx, c.Signals, cause, c.GracePeriod)
	}
	return cause
}

// startAll starts every worker; on error it returns how many started.
func (j *job) startAll() (int, error) {
	c := &j.cfg
	for local := range c.NprocPerNode {
		rank := c.NodeRank*c.NprocPerNode + local
		w, err := j.start(rank, local)
		if err != nil {
			return len(j.workers), &StartError{Rank: rank, Err: err}
		}
		j.workers = append(j.workers, w)
	}
	return len(j.workers), nil
}

func (j *job) start(rank, local int) (*worker, error) {
	c := &j.cfg
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(c.Cmd[0], c.Cmd[1:]...)
	cmd.Env = j.workerEnv(rank, local)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	outW.Close() // the worker has its copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	w := &worker{rank: rank, localRank: local, cmd: cmd, pipes: []*os.File{outR, errR}, drained: make(chan struct{})}
	prefix := "[rank " + strconv.Itoa(rank) + "] "
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pump(outR, j.stdout, prefix, &w.out) }()
	go func() { defer wg.Done(); pump(errR, j.stderr, prefix, &w.out) }()
	go func() { wg.Wait(); close(w.drained) }()
	return w, nil
}

// awaitDrain waits until w's output is read to EOF or the deadline passes.
func (j *job) awaitDrain(w *worker, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-w.drained:
	case <-t.C:
	}
}

// drainAll reads what the exited workers left in their pipes, for at most
// drainTimeout, then closes the pipes.
func (j *job) drainAll() {
	deadline := time.Now().Add(drainTimeout)
	for _, w := range j.workers {
		j.awaitDrain(w, deadline)
		for _, p := range w.pipes {
			p.Close() // makes a pump still reading return
		}
		<-w.drained
	}
}

func (j *job) workerError(w *worker, st *os.ProcessState) *WorkerError {
	e := &WorkerError{Rank: w.rank, LocalRank: w.localRank, NodeRank: j.cfg.NodeRank, Pid: w.cmd.Process.Pid, ExitStatus: -1, Tail: w.out.snapshot()}
	if st != nil {
		e.ExitStatus = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
		}
	}
	return e
}

// envStripped are inherited variables that would mislead a worker: torch
// would look for an agent store that does not exist, and detcoll's store
// address is given explicitly.
var envStripped = []string{"TORCHELASTIC_USE_AGENT_STORE", EnvStorePort}

// workerEnv is cfg.Env with the worker's variables set.
func (j *job) workerEnv(rank, local int) []string {
	c := &j.cfg
	itoa := strconv.Itoa
	set := [][2]string{
		{"RANK", itoa(rank)},
		{"WORLD_SIZE", itoa(j.world)},
		{"LOCAL_RANK", itoa(local)},
		{"LOCAL_WORLD_SIZE", itoa(c.NprocPerNode)},
		{"GROUP_RANK", itoa(c.NodeRank)},
		{"GROUP_WORLD_SIZE", itoa(c.Nnodes)},
		{"ROLE_RANK", itoa(rank)},
		{"ROLE_WORLD_SIZE", itoa(j.world)},
		{"ROLE_NAME", "default"},
		{"MASTER_ADDR", j.torchAddr},
		{"MASTER_PORT", itoa(j.torchPort)},
		{EnvRank, itoa(rank)},
		{EnvWorldSize, itoa(j.world)},
		{EnvLocalRank, itoa(local)},
		{EnvLocalWorldSize, itoa(c.NprocPerNode)},
		{EnvNodeRank, itoa(c.NodeRank)},
		{EnvNnodes, itoa(c.Nnodes)},
		{EnvStoreAddr, j.storeAddr},
		{EnvToken, j.token},
	}
	drop := make(map[string]bool, len(set)+len(envStripped))
	for _, kv := range set {
		drop[kv[0]] = true
	}
	for _, k := range envStripped {
		drop[k] = true
	}
	env := make([]string, 0, len(c.Env)+len(set)+1)
	hasOMP := false
	for _, kv := range c.Env {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] {
			continue
		}
		hasOMP = hasOMP || k == "OMP_NUM_THREADS"
		env = append(env, kv)
	}
	for _, kv := range set {
		env = append(env, kv[0]+"="+kv[1])
	}
	if !hasOMP && c.NprocPerNode > 1 {
		env = append(env, "OMP_NUM_THREADS=1")
	}
	return env
}
