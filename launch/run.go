package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/detcoll/detcoll/store"
)

// Run starts cfg.NprocPerNode workers on this node, supervises them and
// returns once all have exited. See the package doc for the contract.
func Run(ctx context.Context, cfg Config) error {
	c, err := cfg.normalize()
	if err != nil {
		return err
	}
	j := &job{cfg: c, nnodes: c.Nnodes, world: c.Nnodes * c.NprocPerNode, token: c.Token}
	defer j.releaseCPUs()
	return j.run(ctx)
}

// restartable reports whether --max-restarts applies to err: a worker
// failure, not an interruption or a setup error.
// Every node of a job sees the same root cause, so all decide alike.
func restartable(err error) bool {
	var we *WorkerError
	return errors.As(err, &we) && !we.NodeLost
}

type job struct {
	cfg       Config
	nnodes    int  // nodes in this attempt: Nnodes, or those an elastic rendezvous admitted
	world     int  // nnodes × NprocPerNode
	host      bool // this node serves the store because it won the c10d "is host" race
	token     string
	storeAddr string // given to workers
	torchAddr string // MASTER_ADDR given to workers
	torchPort int    // MASTER_PORT given to workers
	server    *store.Server
	nodes     *nodes // coordination with other nodes; nil on a single node
	stdout    *lineWriter
	stderr    *lineWriter
	status    *statusLine // the terminal's last line, drawn by rank 0; nil without a terminal
	workers   []*worker
	attempt   int    // restart count: failure restarts and regroups (TORCHELASTIC_RESTART_COUNT)
	failures  int    // failure restarts, counted against MaxRestarts (regroups are not)
	logRoot   string // LogDir/RdzvID, when logs are written
	// cpus: the CPUs this attempt's workers are bound among (bindPlan);
	// boundThread: the starting thread's own mask could not be put back.
	cpus        []int
	boundThread bool
	assign      [][]int  // each local rank's CPUs (assignCPUs)
	claims      *claimer // this job's claims on oversubscribed CPUs
}

func (j *job) run(ctx context.Context) error {
	c := &j.cfg
	if ctx.Err() != nil {
		return &InterruptedError{Err: ctx.Err()}
	}
	if j.token == "" && !c.AssignNodeRank {
		j.token = randomToken()
		if c.Nnodes > 1 { // normalize let only node 0 through without one
			j.printToken()
		}
	}
	if err := j.openLogRoot(); err != nil {
		return err
	}
	j.stdout, j.stderr = destinations(c.Stdout, c.Stderr)
	if c.StderrTerminal {
		j.status = newStatusLine(c.Stderr)
		j.stderr.status = j.status
		if j.stdout == j.stderr || isTerminal(c.Stdout) {
			j.stdout.status = j.status // the same terminal: its lines go above the bar too
		}
	}
	for {
		err := j.runAttempt(ctx)
		var rg *RegroupError
		if errors.As(err, &rg) && ctx.Err() == nil {
			// As torchelastic's agent: a membership change restarts the
			// group but does not count against --max-restarts.
			j.attempt++
			them := "them"
			if rg.Waiting == 1 {
				them = "it"
			}
			fmt.Fprintf(c.Stderr, "detcoll launch: node %d: node %d saw %s; restarting the worker group to admit %s (attempt %d; not counted against --max-restarts)\n",
				c.NodeRank, rg.Node, rg.what(), them, j.attempt)
			j.workers = nil
			continue
		}
		if err == nil || j.failures >= c.MaxRestarts || !restartable(err) || ctx.Err() != nil {
			return err
		}
		j.attempt++
		j.failures++
		fmt.Fprintf(c.Stderr, "detcoll launch: worker group failed (%v); restarting it (restart %d of %d)\n", err, j.failures, c.MaxRestarts)
		j.workers = nil
	}
}

func (j *job) printToken() {
	fmt.Fprintf(j.cfg.Stderr, "detcoll launch: node 0: no token was given, so this job's store uses a new one.\n"+
		"detcoll launch: start the other nodes with %s=%s in their environment (or --token %s).\n", EnvToken, j.token, j.token)
}

// decideRole makes this node node 0 if it owns MasterAddr and binds the
// store port first (torchrun's c10d "is host" rule); otherwise its rank is
// assigned when it joins (NodeRank -1 until then).
func (j *job) decideRole() error {
	c := &j.cfg
	c.NodeRank = -1
	if !c.hosts.hostable {
		return nil
	}
	generated := j.token == ""
	if generated {
		j.token = randomToken()
	}
	err := j.serve()
	switch {
	case err == nil:
		c.NodeRank, j.host = 0, true
		if generated {
			j.printToken()
		}
		return nil
	case errors.Is(err, syscall.EADDRINUSE):
		c.hosts = c.clientHosts // another node of this host serves the store
		if generated {
			return fmt.Errorf("launch: %w: another node serves the store at %s:%d, so this one needs the job's token: set %s (or --token) to the value it printed",
				ErrInvalidConfig, c.MasterAddr, c.StorePort, EnvToken)
		}
		return nil
	}
	return err
}

// runAttempt runs the worker group once, with a fresh store.
func (j *job) runAttempt(ctx context.Context) (err error) {
	c := &j.cfg
	j.nodes, j.server = nil, nil
	if c.AssignNodeRank && j.attempt == 0 {
		if err := j.decideRole(); err != nil {
			return err
		}
	}
	if c.NodeRank == 0 {
		if j.server == nil {
			if err := j.serve(); err != nil {
				return err
			}
		}
		defer func() {
			if cerr := j.server.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("launch: closing the store: %w", cerr)
			}
		}()
	} else {
		j.storeAddr = net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.StorePort))
		j.torchAddr = c.MasterAddr
		j.torchPort = c.MasterPort
	}
	if c.Nnodes > 1 {
		n, err := j.join(ctx)
		if err != nil {
			return err
		}
		j.nodes = n
		defer n.close()
	}
	return j.supervise(ctx)
}

// serve starts node 0's store on MasterAddr (the address that the other
// nodes route to, never every interface) and picks the torch port.
func (j *job) serve() error {
	c := &j.cfg
	bind := c.hosts.bindIP.String()
	srv, err := store.Listen(net.JoinHostPort(bind, strconv.Itoa(c.StorePort)), j.token)
	if err != nil {
		return fmt.Errorf("launch: starting the store on %s: %w", net.JoinHostPort(bind, strconv.Itoa(c.StorePort)), err)
	}
	_, portStr, _ := net.SplitHostPort(srv.Addr())
	storePort, _ := strconv.Atoi(portStr)
	torchPort := c.MasterPort
	if torchPort == 0 {
		if torchPort, err = freePort(bind, storePort); err != nil {
			srv.Close()
			return fmt.Errorf("launch: picking a port for torch: %w", err)
		}
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
