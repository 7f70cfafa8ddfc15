package launch

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Sources reported in Env.Source.
const (
	SourceDetcoll  = "detcoll"
	SourceTorchrun = "torchrun"
	SourceSlurm    = "slurm"
	SourceOpenMPI  = "openmpi"
	SourceSingle   = "single"
)

// Variables written by Run for its workers and read by FromEnv.
const (
	EnvRank           = "DETCOLL_RANK"
	EnvWorldSize      = "DETCOLL_WORLD_SIZE"
	EnvLocalRank      = "DETCOLL_LOCAL_RANK"
	EnvLocalWorldSize = "DETCOLL_LOCAL_WORLD_SIZE"
	EnvNodeRank       = "DETCOLL_NODE_RANK"
	EnvNnodes         = "DETCOLL_NNODES"
	EnvStoreAddr      = "DETCOLL_STORE_ADDR"
	EnvStorePort      = "DETCOLL_STORE_PORT"
	EnvToken          = "DETCOLL_TOKEN"
)

// ErrInvalidEnv is wrapped by every error of FromEnv.
var ErrInvalidEnv = errors.New("invalid launch environment")

// Env is where this process stands in its job.
type Env struct {
	Rank           int
	WorldSize      int
	LocalRank      int // rank among the processes of this node
	LocalWorldSize int // processes on this node
	// StoreAddr is detcoll's store, host:port. It is empty only when
	// WorldSize is 1 and nothing named a store.
	StoreAddr string
	Token     string // shared secret of the store; may be empty
	Source    string // SourceDetcoll, SourceTorchrun, SourceSlurm, SourceOpenMPI or SourceSingle
}

// ServesStore reports whether this process must serve the store itself:
// rank 0, when a store address is known and no detcoll launcher serves it.
func (e Env) ServesStore() bool {
	return e.Rank == 0 && e.StoreAddr != "" && e.Source != SourceDetcoll
}

// FromEnv discovers this process's Env from environment variables read
// through getenv (normally os.Getenv). See the package doc for the sources,
// their order and the store port rule.
func FromEnv(getenv func(string) string) (Env, error) {
	p := envParser{getenv: getenv}
	var env Env
	switch {
	case p.has(EnvRank) || p.has(EnvWorldSize):
		env = p.world(SourceDetcoll, EnvRank, EnvWorldSize, EnvLocalRank, EnvLocalWorldSize)
		if p.err == nil {
			env.StoreAddr = p.addr(EnvStoreAddr)
		}
	case p.has("RANK") || p.has("WORLD_SIZE"):
		env = p.world(SourceTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
		p.storeAddr(&env)
	case p.has("SLURM_PROCID"):
		env = p.slurm()
		p.storeAddr(&env)
	case p.has("OMPI_COMM_WORLD_RANK") || p.has("OMPI_COMM_WORLD_SIZE"):
		env = p.world(SourceOpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
			"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
		p.storeAddr(&env)
	default:
		env = Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceSingle}
		p.storeAddr(&env)
	}
	if p.err == nil && env.WorldSize > 1 && env.StoreAddr == "" {
		p.fail("%s: world size is %d but no store address is set (set %s, or MASTER_ADDR and MASTER_PORT)",
			env.Source, env.WorldSize, EnvStoreAddr)
	}
	if p.err != nil {
		return Env{}, p.err
	}
	env.Token = getenv(EnvToken)
	return env, nil
}

// envParser reads variables, remembering the first error.
type envParser struct {
	getenv func(string) string
	err    error
}

func (p *envParser) get(name string) string { return strings.TrimSpace(p.getenv(name)) }
func (p *envParser) has(name string) bool   { return p.get(name) != "" }

func (p *envParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("launch: %w: %s", ErrInvalidEnv, fmt.Sprintf(format, args...))
	}
}

// int parses a required (or, with ok false, absent) non-negative integer.
func (p *envParser) int(name string, required bool) (n int, ok bool) {
	v := p.get(name)
	if v == "" {
		if required {
			p.fail("%s is not set", name)
		}
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		p.fail("%s=%q is not a non-negative integer", name, v)
		return 0, false
	}
	return n, true
}

// world reads rank, world size and optional local rank and local world
// size, and checks that they are consistent.
func (p *envParser) world(source, rank, world, localRank, localWorld string) Env {
	var v worldVars
	v.r, _ = p.int(rank, true)
	v.w, _ = p.int(world, true)
	v.lr, v.haveLR = p.int(localRank, false)
	v.lw, v.haveLW = p.int(localWorld, false)
	return p.build(source, [4]string{rank, world, localRank, localWorld}, v)
}

type worldVars struct {
	r, w, lr, lw   int
	haveLR, haveLW bool
}

// build checks v (whose variables are named by names) and fills defaults.
func (p *envParser) build(source string, names [4]string, v worldVars) Env {
	e := Env{Source: source}
	if p.err != nil {
		return e
	}
	rank, world, localRank, localWorld := names[0], names[1], names[2], names[3]
	switch {
	case v.w < 1:
		p.fail("%s: %s=%d must be at least 1", source, world, v.w)
	case v.r >= v.w:
		p.fail("%s: %s=%d is not below %s=%d", source, rank, v.r, world, v.w)
	case v.haveLW && v.lw < 1:
		p.fail("%s: %s=%d must be at least 1", source, localWorld, v.lw)
	case v.haveLW && v.lw > v.w:
		p.fail("%s: %s=%d exceeds %s=%d", source, localWorld, v.lw, world, v.w)
	case v.haveLR && v.haveLW && v.lr >= v.lw:
		p.fail("%s: %s=%d is not below %s=%d", source, localRank, v.lr, localWorld, v.lw)
	case v.haveLR && !v.haveLW && v.lr >= v.w:
		p.fail("%s: %s=%d is not below %s=%d", source, localRank, v.lr, world, v.w)
	}
	if p.err != nil {
		return e
	}
	e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize = v.r, v.w, v.lr, v.lw
	if !v.haveLW {
		e.LocalWorldSize = v.w
	}
	if !v.haveLR {
		e.LocalRank = v.r % e.LocalWorldSize
	}
	return e
}

// slurm reads Slurm's task layout. The local world size comes from
// SLURM_NTASKS_PER_NODE, else from SLURM_TASKS_PER_NODE ("2(x3),1"): the
// entry of node SLURM_NODEID when that is set, else the first.
func (p *envParser) slurm() Env {
	ntasks := "SLURM_NTASKS"
	if !p.has(ntasks) && p.has("SLURM_NPROCS") {
		ntasks = "SLURM_NPROCS"
	}
	localWorld := "SLURM_NTASKS_PER_NODE"
	var v worldVars
	v.r, _ = p.int("SLURM_PROCID", true)
	v.w, _ = p.int(ntasks, true)
	v.lr, v.haveLR = p.int("SLURM_LOCALID", false)
	v.lw, v.haveLW = p.int(localWorld, false)
	if !v.haveLW && p.has("SLURM_TASKS_PER_NODE") && p.err == nil {
		localWorld = "SLURM_TASKS_PER_NODE"
		n, err := slurmTasksOnNode(p.get(localWorld), p.get("SLURM_NODEID"))
		if err != nil {
			p.fail("slurm: %s=%q: %v", localWorld, p.get(localWorld), err)
		}
		v.lw, v.haveLW = n, true
	}
	return p.build(SourceSlurm, [4]string{"SLURM_PROCID", ntasks, "SLURM_LOCALID", localWorld}, v)
}

// slurmTasksOnNode returns the task count of node nodeID ("" = first node)
// in Slurm's compressed list, e.g. "4(x2),3".
func slurmTasksOnNode(list, nodeID string) (int, error) {
	want := 0
	if nodeID != "" {
		n, err := strconv.Atoi(nodeID)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("SLURM_NODEID=%q is not a non-negative integer", nodeID)
		}
		want = n
	}
	node := 0
	for _, item := range strings.Split(list, ",") {
		count, reps := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return 0, errors.New("malformed task list")
			}
			count, reps = item[:i], item[i+2:len(item)-1]
		}
		c, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || c < 1 || r < 1 {
			return 0, errors.New("malformed task list")
		}
		if want < node+r {
			return c, nil
		}
		node += r
	}
	return 0, fmt.Errorf("no entry for node %d", want)
}

// addr reads a required-format host:port variable; "" if unset.
func (p *envParser) addr(name string) string {
	v := p.get(name)
	if v == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		p.fail("%s=%q is not host:port: %v", name, v, err)
		return ""
	}
	if host == "" {
		p.fail("%s=%q has no host", name, v)
		return ""
	}
	if _, err := parsePort(port); err != nil {
		p.fail("%s=%q: %v", name, v, err)
		return ""
	}
	return v
}

// port reads an optional port variable (1-65535); 0 if unset.
func (p *envParser) port(name string) int {
	v := p.get(name)
	if v == "" {
		return 0
	}
	n, err := parsePort(v)
	if err != nil {
		p.fail("%s=%q: %v", name, v, err)
	}
	return n
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q is not an integer in 1-65535", s)
	}
	return n, nil
}

// storeAddr applies the store port rule for sources other than detcoll's.
func (p *envParser) storeAddr(e *Env) {
	if p.err != nil {
		return
	}
	if a := p.addr(EnvStoreAddr); a != "" || p.err != nil || e.Source == SourceSingle {
		e.StoreAddr = a
		if a != "" && a == p.masterAddr() {
			p.fail("%s: %s=%q is MASTER_ADDR:MASTER_PORT, torch's address; detcoll's store needs another port",
				e.Source, EnvStoreAddr, a)
		}
		return
	}
	host := p.get("MASTER_ADDR")
	masterPort := p.port("MASTER_PORT")
	storePort := p.port(EnvStorePort)
	if p.err != nil {
		return
	}
	if host == "" {
		if storePort != 0 {
			p.fail("%s: %s is set but MASTER_ADDR is not", e.Source, EnvStorePort)
		}
		return // FromEnv reports a missing address if the world needs one
	}
	switch {
	case storePort != 0 && storePort == masterPort:
		p.fail("%s: %s=%d is MASTER_PORT, torch's port; detcoll's store needs another", e.Source, EnvStorePort, storePort)
		return
	case storePort != 0:
	case masterPort == 0:
		p.fail("%s: MASTER_ADDR is set but MASTER_PORT is not (or set %s)", e.Source, EnvStorePort)
		return
	case masterPort == 65535:
		p.fail("%s: MASTER_PORT=65535 leaves no MASTER_PORT+1 for detcoll's store; set %s", e.Source, EnvStorePort)
		return
	default:
		storePort = masterPort + 1
	}
	e.StoreAddr = net.JoinHostPort(host, strconv.Itoa(storePort))
}

// masterAddr is MASTER_ADDR:MASTER_PORT, or "" if either is unset.
func (p *envParser) masterAddr() string {
	host, port := p.get("MASTER_ADDR"), p.get("MASTER_PORT")
	if host == "" || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}

// Launched reports whether a launcher (detcoll launch, torchrun, Slurm or
// Open MPI) started this process as a rank of a job, from its rank variable.
func Launched(getenv func(string) string) bool {
	for _, k := range []string{EnvRank, "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"} {
		if getenv(k) != "" {
			return true
		}
	}
	return false
}
