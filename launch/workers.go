package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
	logs            []*os.File    // log files of --redirects/--tee
	drained         chan struct{} // closed when both pumps returned
	// Touched by the event loop only:
	exited  bool             // reaped
	state   *os.ProcessState // its exit
	exitSeq int              // order of reaping, from 1
	sent    []os.Signal      // signals the launcher sent it, in order
	stopped bool             // found stopped (SIGSTOP) when the job failed
}

// signalledBySelf reports whether a signal the launcher had not sent
// killed w: a crash, or a kill from outside (kill -9).
func (w *worker) signalledBySelf() bool {
	ws, ok := w.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	for _, s := range w.sent {
		if s == ws.Signal() {
			return false
		}
	}
	return true
}

// exitEvent reports a reaped worker.
type exitEvent struct {
	w     *worker
	state *os.ProcessState
}

func (ev exitEvent) failed() bool { return ev.state == nil || !ev.state.Success() }

// startAll starts every worker; on error it returns how many started.
func (j *job) startAll() (int, error) {
	c := &j.cfg
	cpus, err := j.bindPlan()
	if err != nil {
		return 0, &StartError{Rank: c.NodeRank * c.NprocPerNode, Err: err}
	}
	j.cpus = cpus
	if cpus != nil {
		j.assignCPUs()
	}
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
	logs, err := j.openLogs(local)
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, err
	}
	shown := c.LocalRanksFilter == nil || slices.Contains(c.LocalRanksFilter, local)
	redirect := c.Redirects.For(local)
	// Rank 0's stderr, when it reaches the launcher's terminal, may draw a
	// bar there (console.go).
	drawn := rank == 0 && j.status != nil && shown && redirect&StdErr == 0
	cmd := exec.Command(c.Cmd[0], c.Cmd[1:]...)
	cmd.Env = j.workerEnv(rank, local, drawn)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = sysProcAttr()
	err = j.startCmd(cmd, local)
	outW.Close() // the worker has its copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		for _, f := range logs {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	w := &worker{rank: rank, localRank: local, cmd: cmd, pipes: []*os.File{outR, errR}, drained: make(chan struct{})}
	prefix := "[rank " + strconv.Itoa(rank) + "] "
	sinks := func(std Std, console *lineWriter, file *os.File) []sink {
		var out []sink
		if shown && redirect&std == 0 {
			out = append(out, sink{w: console, prefix: prefix})
		}
		if file != nil {
			w.logs = append(w.logs, file)
			out = append(out, sink{w: &lineWriter{w: file}})
		}
		return out
	}
	outSinks := sinks(StdOut, j.stdout, logs[0])
	errSinks := sinks(StdErr, j.stderr, logs[1])
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pump(outR, outSinks, &w.out) }()
	go func() {
		defer wg.Done()
		if drawn {
			pumpStatus(errR, errSinks, &w.out, j.status)
		} else {
			pump(errR, errSinks, &w.out)
		}
	}()
	go func() {
		wg.Wait()
		for _, f := range w.logs {
			f.Close()
		}
		close(w.drained)
	}()
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

func (j *job) workerError(w *worker) *WorkerError {
	st := w.state
	e := &WorkerError{Rank: w.rank, LocalRank: w.localRank, NodeRank: j.cfg.NodeRank, Pid: w.cmd.Process.Pid, ExitStatus: -1, Tail: w.out.snapshot()}
	if f, ok := w.out.failure(); ok {
		e.Detail = f.Err
	}
	if st != nil {
		e.ExitStatus = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
			e.ByLauncher = !w.signalledBySelf()
		}
	}
	return e
}

// envStripped are inherited variables that would mislead a worker:
// detcoll's store address is given explicitly, and only the rank whose
// stderr the launcher draws on its terminal may believe it has one.
var envStripped = []string{EnvStorePort, EnvConsoleTTY}

// workerEnv is cfg.Env with the worker's variables set; drawn says that
// the worker's stderr is drawn on the launcher's terminal.
func (j *job) workerEnv(rank, local int, drawn bool) []string {
	c := &j.cfg
	itoa := strconv.Itoa
	set := [][2]string{
		{"RANK", itoa(rank)},
		{"WORLD_SIZE", itoa(j.world)},
		{"LOCAL_RANK", itoa(local)},
		{"LOCAL_WORLD_SIZE", itoa(c.NprocPerNode)},
		{"GROUP_RANK", itoa(c.NodeRank)},
		{"GROUP_WORLD_SIZE", itoa(j.nnodes)},
		{"ROLE_RANK", itoa(rank)},
		{"ROLE_WORLD_SIZE", itoa(j.world)},
		{"ROLE_NAME", c.Role},
		{"MASTER_ADDR", j.torchAddr},
		{"MASTER_PORT", itoa(j.torchPort)},
		// torchelastic's meaning: failure restarts only (a regroup that
		// admits a waiting node leaves it unchanged); DETCOLL_ATTEMPT
		// counts every attempt.
		{"TORCHELASTIC_RESTART_COUNT", itoa(j.failures)},
		{"DETCOLL_ATTEMPT", itoa(j.attempt)},
		{"TORCHELASTIC_MAX_RESTARTS", itoa(c.MaxRestarts)},
		{"TORCHELASTIC_RUN_ID", c.RdzvID},
		// No agent store listens on MASTER_PORT: torch's rank 0 must
		// host its own TCPStore there, as under a plain env:// launch.
		{"TORCHELASTIC_USE_AGENT_STORE", "False"},
		{EnvRank, itoa(rank)},
		{EnvWorldSize, itoa(j.world)},
		{EnvLocalRank, itoa(local)},
		{EnvLocalWorldSize, itoa(c.NprocPerNode)},
		{EnvNodeRank, itoa(c.NodeRank)},
		{EnvNnodes, itoa(j.nnodes)},
		{EnvStoreAddr, j.storeAddr},
		{EnvToken, j.token},
	}
	if c.hosts.advertise != "" {
		set = append(set, [2]string{tcpHostEnv, c.hosts.advertise})
	}
	if drawn {
		set = append(set, [2]string{EnvConsoleTTY, "1"})
	}
	if j.logRoot != "" {
		set = append(set, [2]string{"TORCHELASTIC_ERROR_FILE", filepath.Join(j.attemptDir(local), "error.json")})
	}
	drop := make(map[string]bool, len(set)+len(envStripped))
	for _, kv := range set {
		drop[kv[0]] = true
	}
	for _, k := range envStripped {
		drop[k] = true
	}
	env := make([]string, 0, len(c.Env)+len(set)+3)
	has := map[string]bool{}
	for _, kv := range c.Env {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] {
			continue
		}
		has[k] = true
		env = append(env, kv)
	}
	for _, kv := range set {
		env = append(env, kv[0]+"="+kv[1])
	}
	// torchrun's defaults, kept when the environment sets them.
	if !has["OMP_NUM_THREADS"] && c.NprocPerNode > 1 {
		env = append(env, "OMP_NUM_THREADS=1")
	}
	// The same for the Go runtime of a worker (detcoll's own, or its C
	// library's inside Python) whose collectives go over TCP (forced, or
	// more than one node): by default every worker runs as many threads as
	// the host has CPUs, and their wake-ups land on the cores the other
	// workers wait on. Over shared memory (one node, the default) the share
	// made small collectives bimodal instead, so it is not set there
	// (docs/launcher.md, "GOMAXPROCS").
	if !has["GOMAXPROCS"] && c.NprocPerNode > 1 && (j.nnodes > 1 || envValue(env, transportEnv) == "tcp") {
		env = append(env, "GOMAXPROCS="+itoa(goMaxProcsShare(c.NprocPerNode)))
	}
	if !has[EnvNodeCPUs] && j.cpus != nil {
		env = append(env, EnvNodeCPUs+"="+itoa(len(j.cpus)))
	}
	for _, k := range []string{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"} {
		if !has[k] {
			env = append(env, k+"=1")
		}
	}
	return env
}

// goMaxProcsShare is a worker's share of this host's CPUs (runtime.NumCPU:
// the ones the launcher may run on), at least 1.
func goMaxProcsShare(nproc int) int { return max(1, runtime.NumCPU()/nproc) }

// transportEnv is cluster.EnvTransport (cluster is a floor above launch).
const transportEnv = "DETCOLL_TRANSPORT"

// envValue is envLookup's value lower-cased and trimmed, as cluster reads
// a choice.
func envValue(env []string, k string) string {
	return strings.ToLower(strings.TrimSpace(envLookup(env, k)))
}
