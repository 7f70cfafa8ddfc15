package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Variables read by ConfigFromEnv, one per Config field that a command line
// would set. Nnodes, NodeRank and Token come from EnvNnodes, EnvNodeRank and
// EnvToken, the variables Run also gives its workers.
const (
	EnvNprocPerNode = "DETCOLL_NPROC_PER_NODE"
	EnvMasterAddr   = "DETCOLL_MASTER_ADDR" // falls back to MASTER_ADDR
	EnvMasterPort   = "DETCOLL_MASTER_PORT" // falls back to MASTER_PORT
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
)

// ErrInvalidConfig is wrapped by Run's and ConfigFromEnv's errors about the
// Config itself.
var ErrInvalidConfig = errors.New("invalid launch config")

// Config describes the job of one node. Every node of a job uses the same
// Nnodes, NprocPerNode, MasterAddr, MasterPort and Token.
type Config struct {
	NprocPerNode int // workers on this node; 0 means 1
	Nnodes       int // nodes in the job; 0 means 1
	NodeRank     int // this node, 0 … Nnodes-1; node 0 serves the store

	// MasterAddr:MasterPort is node 0's address, where detcoll's store
	// listens. Required with several nodes. On a single node MasterAddr
	// defaults to 127.0.0.1 and MasterPort 0 picks a free port.
	MasterAddr string
	MasterPort int

	// Standalone runs a single-node job whose store listens on 127.0.0.1
	// only; MasterAddr is ignored and Nnodes must be 1.
	Standalone bool

	// Token is the store's shared secret. Empty on a single node means a
	// random one; with several nodes it means none (anyone who can reach
	// MasterAddr:MasterPort can use the store).
	Token string

	Cmd []string // the worker command and its arguments

	Stdout, Stderr io.Writer // nil means os.Stdout, os.Stderr
	Env            []string  // base environment of workers; nil means os.Environ()

	// GracePeriod is the time between SIGTERM (or a forwarded signal) and
	// SIGKILL when stopping workers; 0 means DefaultGracePeriod.
	GracePeriod time.Duration

	// Signals, if not nil, delivers signals (normally from signal.Notify
	// for SIGINT and SIGTERM) that Run forwards to every worker's process
	// group; the first one also stops the job.
	Signals <-chan os.Signal
}

// ConfigFromEnv returns a Config whose NprocPerNode, Nnodes, NodeRank,
// MasterAddr, MasterPort, Standalone, Token and GracePeriod come from the
// DETCOLL_* variables read through getenv (normally os.Getenv); unset
// variables leave zero values. A command typically uses the result as its
// flag defaults (see RegisterFlags) so that flags override the environment.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var errs []error
	get := func(names ...string) (string, string) {
		for _, n := range names {
			if v := strings.TrimSpace(getenv(n)); v != "" {
				return n, v
			}
		}
		return "", ""
	}
	num := func(dst *int, names ...string) {
		n, v := get(names...)
		if v == "" {
			return
		}
		x, err := strconv.Atoi(v)
		if err != nil || x < 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a non-negative integer", n, v))
			return
		}
		*dst = x
	}
	num(&c.NprocPerNode, EnvNprocPerNode)
	num(&c.Nnodes, EnvNnodes)
	num(&c.NodeRank, EnvNodeRank)
	num(&c.MasterPort, EnvMasterPort, "MASTER_PORT")
	_, c.MasterAddr = get(EnvMasterAddr, "MASTER_ADDR")
	c.Token = getenv(EnvToken)
	if n, v := get(EnvStandalone); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a boolean", n, v))
		}
		c.Standalone = b
	}
	if n, v := get(EnvGracePeriod); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", n, v, err))
		}
		c.GracePeriod = d
	}
	if len(errs) > 0 {
		return Config{}, fmt.Errorf("launch: %w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return c, nil
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

// RegisterFlags defines torchrun-style flags on fs (--nproc-per-node,
// --nnodes, --node-rank, --master-addr, --master-port, --standalone,
// --token, --grace-period) that write into c, with c's current values as
// defaults. Call it on the result of ConfigFromEnv so that every flag can
// also come from the environment; flags given on the command line win.
// Passing the token in DETCOLL_TOKEN rather than --token keeps it out of ps.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.NprocPerNode, "nproc-per-node", c.NprocPerNode, "workers per node (env "+EnvNprocPerNode+"; 0 means 1)")
	fs.IntVar(&c.Nnodes, "nnodes", c.Nnodes, "number of nodes (env "+EnvNnodes+"; 0 means 1)")
	fs.IntVar(&c.NodeRank, "node-rank", c.NodeRank, "rank of this node (env "+EnvNodeRank+")")
	fs.StringVar(&c.MasterAddr, "master-addr", c.MasterAddr, "address of node 0 (env "+EnvMasterAddr+" or MASTER_ADDR)")
	fs.IntVar(&c.MasterPort, "master-port", c.MasterPort, "port of detcoll's store on node 0 (env "+EnvMasterPort+" or MASTER_PORT; 0 picks a free one on a single node)")
	fs.BoolVar(&c.Standalone, "standalone", c.Standalone, "single-node job, store on 127.0.0.1 (env "+EnvStandalone+")")
	fs.StringVar(&c.Token, "token", c.Token, "store secret (prefer env "+EnvToken+")")
	fs.DurationVar(&c.GracePeriod, "grace-period", c.GracePeriod, "time between SIGTERM and SIGKILL (env "+EnvGracePeriod+"; 0 means 5s)")
}

// normalize applies defaults and checks c.
func (c Config) normalize() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("launch: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.NprocPerNode == 0 {
		c.NprocPerNode = 1
	}
	if c.Nnodes == 0 {
		c.Nnodes = 1
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
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
	switch {
	case len(c.Cmd) == 0 || c.Cmd[0] == "":
		return bad("no worker command")
	case c.NprocPerNode < 0:
		return bad("NprocPerNode=%d is negative", c.NprocPerNode)
	case c.Nnodes < 0:
		return bad("Nnodes=%d is negative", c.Nnodes)
	case c.NodeRank < 0 || c.NodeRank >= c.Nnodes:
		return bad("NodeRank=%d is not in 0…%d", c.NodeRank, c.Nnodes-1)
	case c.MasterPort < 0 || c.MasterPort > 65535:
		return bad("MasterPort=%d is not in 0…65535", c.MasterPort)
	case c.GracePeriod < 0:
		return bad("GracePeriod=%v is negative", c.GracePeriod)
	case c.Standalone && c.Nnodes != 1:
		return bad("Standalone needs Nnodes=1, not %d", c.Nnodes)
	case c.Nnodes > 1 && c.MasterAddr == "":
		return bad("%d nodes need MasterAddr (node 0's address)", c.Nnodes)
	case c.Nnodes > 1 && c.MasterPort == 0:
		return bad("%d nodes need MasterPort (the store's port on node 0)", c.Nnodes)
	}
	if c.Standalone || c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	return c, nil
}
