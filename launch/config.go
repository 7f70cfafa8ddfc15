package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Variables that stand in for flags of `detcoll launch` (see ParseArgs for
// the full list: every flag reads DETCOLL_… and then torchrun's PET_…).
// Nnodes, NodeRank and Token come from EnvNnodes, EnvNodeRank and EnvToken,
// the variables Run also gives its workers.
const (
	EnvNprocPerNode = "DETCOLL_NPROC_PER_NODE"
	EnvMasterAddr   = "DETCOLL_MASTER_ADDR" // falls back to PET_MASTER_ADDR, MASTER_ADDR
	EnvMasterPort   = "DETCOLL_MASTER_PORT" // falls back to PET_MASTER_PORT, MASTER_PORT
	EnvStandalone   = "DETCOLL_STANDALONE"
	EnvGracePeriod  = "DETCOLL_GRACE_PERIOD" // a Go duration ("10s") or seconds ("10")
)

// Defaults applied by Run to zero Config fields.
const (
	DefaultGracePeriod = 5 * time.Second
	// MaxLineLen is the longest output line copied as one line; longer ones
	// are split.
	MaxLineLen = 64 << 10
	// TailLines is how many of a failed worker's last output lines
	// WorkerError keeps.
	TailLines = 20
	// DefaultMonitorInterval is the node heartbeat period.
	DefaultMonitorInterval = 500 * time.Millisecond
	// DefaultLastCallTimeout is torchrun's last_call_timeout (30 s).
	DefaultLastCallTimeout = 30 * time.Second
)

// ErrInvalidConfig is wrapped by Run's and ParseArgs's errors about the
// Config itself.
var ErrInvalidConfig = errors.New("invalid launch config")

// Config describes the job of one node. Every node of a job uses the same
// Nnodes, NprocPerNode, MasterAddr, MasterPort, StorePort, RdzvID and Token.
type Config struct {
	NprocPerNode int // workers on this node; 0 means 1
	Nnodes       int // nodes in the job; 0 means 1
	NodeRank     int // this node, 0 … Nnodes-1; node 0 serves the store

	// MinNodes below Nnodes makes the job elastic (torchrun's --nnodes
	// MIN:MAX): node 0's rendezvous admits nodes until Nnodes have joined,
	// or, once MinNodes have, until LastCallTimeout has passed without a
	// new one; the job then runs with the admitted nodes (WORLD_SIZE =
	// admitted × NprocPerNode), node ranks in join order (AssignNodeRank
	// must be set). A node that comes later fails with ErrRendezvousClosed.
	// 0 means Nnodes (a fixed job).
	MinNodes int
	// LastCallTimeout is the elastic rendezvous's last call: how long node
	// 0 waits for one more node once MinNodes have joined (each join
	// starts it again, as torchrun's c10d does); 0 means
	// DefaultLastCallTimeout.
	LastCallTimeout time.Duration

	// AssignNodeRank (torchrun's c10d rendezvous without --node-rank)
	// ignores NodeRank: the node that owns MasterAddr and binds the store
	// port first is node 0, the others get 1 … Nnodes-1 in join order.
	AssignNodeRank bool

	// MasterAddr is node 0's address: node 0 serves detcoll's store there
	// and workers get it as MASTER_ADDR. It must be an address of node 0
	// itself; the other nodes must have a route to it. Required with
	// several nodes; 127.0.0.1 by default on one.
	MasterAddr string
	// MasterPort is exactly the MASTER_PORT workers get (torch's port);
	// 0 picks a free one (node 0 picks, the others learn it).
	MasterPort int
	// StorePort is detcoll's store on node 0, never MasterPort: 0 means
	// MasterPort+1 when MasterPort is set, else a free port (one node
	// only). Workers find the store in DETCOLL_STORE_ADDR.
	StorePort int

	// Standalone runs a single-node job whose store listens on 127.0.0.1
	// only; MasterAddr is ignored and Nnodes must be 1.
	Standalone bool

	// Token is the store's shared secret. Empty on a single node, or on
	// node 0 of several, means a random one (node 0 of several prints it
	// on Stderr for the other nodes); the other nodes must be given it.
	Token string

	// TCPHost is the address this node's workers listen on and advertise
	// (DETCOLL_TCP_HOST). Empty means the variable from Env if set, else
	// 127.0.0.1 on one node, else the address of this host that routes to
	// MasterAddr.
	TCPHost string

	RdzvBackend string // "static" (default) or "c10d": the same here
	RdzvID      string // job id, TORCHELASTIC_RUN_ID; "" means "none"
	// RdzvTimeout bounds the wait for the other nodes; 0 means
	// DefaultRdzvTimeout.
	RdzvTimeout time.Duration
	// MaxRestarts is how many times the whole worker group (every node's)
	// is restarted after a worker failure, each time with a new store.
	// An elastic job's restarts to admit waiting nodes do not count.
	MaxRestarts int
	Role        string // ROLE_NAME; "" means "default"
	// MonitorInterval is the node heartbeat period; 0 means
	// DefaultMonitorInterval.
	MonitorInterval time.Duration

	// BindTo binds workers to this node's CPUs (the launcher's own):
	// BindAuto ("") when they outnumber the CPUs, BindCore always (an error where binding is unsupported),
	// BindNone never. Bound workers get EnvNodeCPUs (docs/launcher.md,
	// "CPU binding").
	BindTo Binding

	// LogDir receives LogDir/RdzvID/attempt_N/LOCAL_RANK/{stdout,stderr}.log
	// for the streams in Redirects (file only) and Tee (file and console).
	// Empty with Redirects or Tee set means a new temporary directory.
	LogDir         string
	Redirects, Tee Streams
	// LocalRanksFilter, if not nil, lists the local ranks whose output is
	// shown on the console.
	LocalRanksFilter []int

	Cmd []string // the worker command and its arguments

	Stdout, Stderr io.Writer // nil means os.Stdout, os.Stderr
	// StderrTerminal says that Stderr is a terminal (found by Run for a
	// terminal *os.File; set it for a writer that reaches one): rank 0's
	// carriage-return updates are then drawn there in place, and rank 0
	// gets EnvConsoleTTY=1 (see EnvConsoleTTY).
	StderrTerminal bool
	Env            []string // base environment of workers; nil means os.Environ()

	// GracePeriod is the time between SIGTERM (or a forwarded signal) and
	// SIGKILL when stopping workers; 0 means DefaultGracePeriod.
	GracePeriod time.Duration

	// Signals, if not nil, delivers signals (normally from signal.Notify
	// for SIGINT and SIGTERM) that Run forwards to every worker's process
	// group; the first one also stops the job.
	Signals <-chan os.Signal

	hosts       hostInfo // filled by normalize
	clientHosts hostInfo // with AssignNodeRank: hosts if another node serves
}

// elastic reports whether the job admits between MinNodes and Nnodes nodes
// (after normalize).
func (c *Config) elastic() bool { return c.MinNodes < c.Nnodes }

// nnodesSpec is --nnodes as given: N or MIN:MAX.
func (c *Config) nnodesSpec() string {
	if c.elastic() {
		return fmt.Sprintf("%d:%d", c.MinNodes, c.Nnodes)
	}
	return strconv.Itoa(c.Nnodes)
}

// parseDuration accepts a Go duration or a number of seconds.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > 1e9 {
			return 0, errors.New("out of range")
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err == nil && d < 0 {
		err = errors.New("negative duration")
	}
	return d, err
}

// normalize applies defaults and checks c, host addresses included, so that
// a bad config fails before anything starts.
func (c Config) normalize() (Config, error) {
	c.setDefaults()
	if c.StorePort == 0 && c.MasterPort != 0 {
		if c.MasterPort == 65535 {
			return Config{}, invalidConfig("MasterPort=65535 leaves no MasterPort+1 for detcoll's store; set StorePort (--store-port)")
		}
		c.StorePort = c.MasterPort + 1
	}
	if err := c.checkFields(); err != nil {
		return Config{}, err
	}
	if err := c.checkLocalRanks(); err != nil {
		return Config{}, err
	}
	if c.Standalone || c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.AssignNodeRank {
		c.NodeRank = 0 // until the rendezvous says
	}
	if err := c.checkHosts(); err != nil {
		return Config{}, fmt.Errorf("launch: %w: %w", ErrInvalidConfig, err)
	}
	if c.AssignNodeRank && !c.hosts.hostable && c.Token == "" {
		return Config{}, invalidConfig("MasterAddr %q is not this host's, so another node serves the store: set %s (or --token) to the value it printed", c.MasterAddr, EnvToken)
	}
	return c, nil
}

// invalidConfig is an ErrInvalidConfig error saying what is wrong.
func invalidConfig(format string, args ...any) error {
	return fmt.Errorf("launch: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// setDefaults fills the fields left zero, in field order.
func (c *Config) setDefaults() {
	if c.NprocPerNode == 0 {
		c.NprocPerNode = 1
	}
	if c.Nnodes == 0 {
		c.Nnodes = 1
	}
	if c.MinNodes == 0 {
		c.MinNodes = c.Nnodes
	}
	if c.LastCallTimeout == 0 {
		c.LastCallTimeout = DefaultLastCallTimeout
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.RdzvTimeout == 0 {
		c.RdzvTimeout = DefaultRdzvTimeout
	}
	if c.MonitorInterval == 0 {
		c.MonitorInterval = DefaultMonitorInterval
	}
	if c.RdzvBackend == "" {
		c.RdzvBackend = "static"
	}
	if c.RdzvID == "" {
		c.RdzvID = "none"
	}
	if c.Role == "" {
		c.Role = "default"
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if !c.StderrTerminal {
		c.StderrTerminal = isTerminal(c.Stderr)
	}
	if c.AssignNodeRank && c.Nnodes <= 1 {
		c.AssignNodeRank, c.NodeRank = false, 0 // one node: it is node 0
	}
}

// checkFields checks each field's range, and the fields that go together.
func (c *Config) checkFields() error {
	switch {
	case len(c.Cmd) == 0 || c.Cmd[0] == "":
		return invalidConfig("no worker command")
	case c.NprocPerNode < 0:
		return invalidConfig("NprocPerNode (--nproc-per-node)=%d is negative", c.NprocPerNode)
	case c.Nnodes < 0:
		return invalidConfig("Nnodes (--nnodes)=%d is negative", c.Nnodes)
	case c.MinNodes < 1 || c.MinNodes > c.Nnodes:
		return invalidConfig("MinNodes (--nnodes MIN:MAX)=%d is not in 1…%d (Nnodes, MAX)", c.MinNodes, c.Nnodes)
	case c.MinNodes < c.Nnodes && !c.AssignNodeRank:
		return invalidConfig("an elastic job (--nnodes %d:%d) assigns node ranks in join order: set AssignNodeRank (no --node-rank)", c.MinNodes, c.Nnodes)
	case c.LastCallTimeout < 0:
		return invalidConfig("LastCallTimeout (--rdzv-conf last_call_timeout)=%v is negative", c.LastCallTimeout)
	case !c.AssignNodeRank && (c.NodeRank < 0 || c.NodeRank >= c.Nnodes):
		return invalidConfig("NodeRank (--node-rank)=%d is not in 0…%d", c.NodeRank, c.Nnodes-1)
	case c.MasterPort < 0 || c.MasterPort > 65535:
		return invalidConfig("MasterPort (--master-port)=%d is not in 0…65535", c.MasterPort)
	case c.StorePort < 0 || c.StorePort > 65535:
		return invalidConfig("StorePort (--store-port)=%d is not in 0…65535", c.StorePort)
	case c.StorePort != 0 && c.StorePort == c.MasterPort:
		return invalidConfig("StorePort (--store-port)=%d is MasterPort, torch's port; detcoll's store needs another", c.StorePort)
	case c.GracePeriod < 0:
		return invalidConfig("GracePeriod (--grace-period)=%v is negative", c.GracePeriod)
	case c.RdzvTimeout < 0:
		return invalidConfig("RdzvTimeout (--rdzv-timeout)=%v is negative", c.RdzvTimeout)
	case c.MonitorInterval < 0:
		return invalidConfig("MonitorInterval (--monitor-interval)=%v is negative", c.MonitorInterval)
	case c.MaxRestarts < 0:
		return invalidConfig("MaxRestarts (--max-restarts)=%d is negative", c.MaxRestarts)
	case !validBinding(c.BindTo):
		return invalidConfig("BindTo (--bind-to)=%q is not auto, none or core", c.BindTo)
	case c.RdzvBackend != "static" && c.RdzvBackend != "c10d":
		return invalidConfig("RdzvBackend (--rdzv-backend)=%q is not static or c10d", c.RdzvBackend)
	case c.Standalone && c.Nnodes != 1:
		return invalidConfig("Standalone (--standalone) needs Nnodes=1, not %d", c.Nnodes)
	case c.Nnodes > 1 && c.MasterAddr == "":
		return invalidConfig("%d nodes need MasterAddr (--master-addr: node 0's address)", c.Nnodes)
	case c.Nnodes > 1 && c.StorePort == 0:
		return invalidConfig("%d nodes need MasterPort or StorePort (--master-port, --store-port)", c.Nnodes)
	case c.Nnodes > 1 && c.NodeRank > 0 && c.Token == "" && !c.AssignNodeRank:
		return invalidConfig("node %d of %d needs the job's token: set %s (or --token) to the value node 0 printed", c.NodeRank, c.Nnodes, EnvToken)
	}
	return nil
}

// checkLocalRanks checks that the options naming local ranks name ranks
// of this node.
func (c *Config) checkLocalRanks() error {
	for _, lr := range c.LocalRanksFilter {
		if lr < 0 || lr >= c.NprocPerNode {
			return invalidConfig("LocalRanksFilter (--local-ranks-filter) names local rank %d, not in 0…%d", lr, c.NprocPerNode-1)
		}
	}
	for _, s := range []Streams{c.Redirects, c.Tee} {
		for lr := range s.PerRank {
			if lr < 0 || lr >= c.NprocPerNode {
				return invalidConfig("Redirects/Tee (--redirects, --tee) name local rank %d, not in 0…%d", lr, c.NprocPerNode-1)
			}
		}
	}
	return nil
}
