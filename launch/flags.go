package launch

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrUsage is wrapped by ParseArgs's errors about the command line or the
// environment variables that stand in for it (a command exits 2 on it).
// Every such error is also ErrInvalidConfig.
var ErrUsage = fmt.Errorf("%w: usage", ErrInvalidConfig)

// ErrHelp is returned by ParseArgs for -h or --help before the command.
var ErrHelp = errors.New("launch: help requested")

// Defaults of torchrun kept by ParseArgs.
const (
	// DefaultMasterPort is torchrun's --master-port default, used with
	// several nodes when no port is given. A single node picks a free
	// port instead, so that jobs on one host never collide.
	DefaultMasterPort = 29500
	// DefaultRdzvPort is torchrun's port of a --rdzv-endpoint without one.
	DefaultRdzvPort = 29400
	// DefaultRdzvTimeout is torchrun's rendezvous timeout (600 s for the
	// static backend, join_timeout of the c10d one).
	DefaultRdzvTimeout = 600 * time.Second
)

// EnvPython names the interpreter used for Python workers (default python3).
const EnvPython = "DETCOLL_PYTHON"

// flagSpec is one command-line flag of `detcoll launch`.
type flagSpec struct {
	name  string   // canonical, with dashes
	short string   // one-letter alias, or ""
	env   []string // variables read when the flag is absent, in order
	arg   string   // value placeholder in the help; "" for a boolean flag
	help  string
	set   func(o *cliOpts, v string) error
}

// cliOpts gathers the raw values before they become a Config.
type cliOpts struct {
	cfg                     Config
	nnodesSet, nodeRankSet  bool
	masterPortSet           bool
	rdzvEndpoint, rdzvConf  string
	module, noPython, run   bool
	redirects, tee, filters string
	startMethod             string
	monitor                 time.Duration
	seen                    map[string]string // flag → where it came from (for errors)
}

func boolValue(v string) (bool, error) {
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%q is not a boolean", v)
	}
	return b, nil
}

func intValue(v string, min int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", v)
	}
	if n < min {
		return 0, fmt.Errorf("%d is below %d", n, min)
	}
	return n, nil
}

var launchFlags = []flagSpec{
	{name: "nproc-per-node", env: []string{EnvNprocPerNode, "PET_NPROC_PER_NODE"}, arg: "N|gpu|cpu|auto",
		help: "workers on this node: a positive integer, gpu (one per visible GPU), cpu (one per CPU) or auto (gpu if any, else cpu)",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.NprocPerNode, err = ParseNproc(v)
			return err
		}},
	{name: "nnodes", env: []string{EnvNnodes, "PET_NNODES"}, arg: "N|MIN:MAX",
		help: "number of nodes; MIN:MAX (torchrun's elastic range) admits nodes in join order until MAX joined, or MIN and the last call (--rdzv-conf last_call_timeout) ended",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.MinNodes, o.cfg.Nnodes, err = ParseNnodes(v)
			o.nnodesSet = true
			return err
		}},
	{name: "node-rank", env: []string{EnvNodeRank, "PET_NODE_RANK"}, arg: "R",
		help: "rank of this node, 0 … nnodes-1; node 0 serves the store",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.NodeRank, err = intValue(v, 0)
			o.nodeRankSet = true
			return err
		}},
	{name: "master-addr", env: []string{EnvMasterAddr, "PET_MASTER_ADDR", "MASTER_ADDR"}, arg: "HOST",
		help: "address of node 0 (must be an address of node 0 itself); workers get it as MASTER_ADDR",
		set:  func(o *cliOpts, v string) error { o.cfg.MasterAddr = v; return nil }},
	{name: "master-port", env: []string{EnvMasterPort, "PET_MASTER_PORT", "MASTER_PORT"}, arg: "PORT",
		help: "workers get exactly this MASTER_PORT (torch's port); detcoll's store takes PORT+1 unless --store-port (default: 29500 with several nodes, a free port on one)",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.MasterPort, err = intValue(v, 1)
			if err == nil && o.cfg.MasterPort > 65535 {
				err = fmt.Errorf("%d is not a port", o.cfg.MasterPort)
			}
			o.masterPortSet = true
			return err
		}},
	{name: "store-port", env: []string{EnvStorePort}, arg: "PORT",
		help: "port of detcoll's store on node 0 (workers find it in " + EnvStoreAddr + ")",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.StorePort, err = intValue(v, 1)
			if err == nil && o.cfg.StorePort > 65535 {
				err = fmt.Errorf("%d is not a port", o.cfg.StorePort)
			}
			return err
		}},
	{name: "rdzv-backend", env: []string{"DETCOLL_RDZV_BACKEND", "PET_RDZV_BACKEND"}, arg: "static|c10d",
		help: "rendezvous backend: both run detcoll's store on node 0 (etcd is not supported)",
		set: func(o *cliOpts, v string) error {
			switch v {
			case "static", "c10d":
				o.cfg.RdzvBackend = v
				return nil
			}
			return fmt.Errorf("%q is not supported (static or c10d; both use detcoll's store on node 0)", v)
		}},
	{name: "rdzv-endpoint", env: []string{"DETCOLL_RDZV_ENDPOINT", "PET_RDZV_ENDPOINT"}, arg: "HOST[:PORT]",
		help: "detcoll's store on node 0 (default port 29400); sets --master-addr to HOST",
		set:  func(o *cliOpts, v string) error { o.rdzvEndpoint = v; return nil }},
	{name: "rdzv-id", env: []string{"DETCOLL_RDZV_ID", "PET_RDZV_ID"}, arg: "ID",
		help: "job id, the same on every node (workers get TORCHELASTIC_RUN_ID); default none",
		set:  func(o *cliOpts, v string) error { o.cfg.RdzvID = v; return nil }},
	{name: "rdzv-conf", env: []string{"DETCOLL_RDZV_CONF", "PET_RDZV_CONF"}, arg: "K=V,…",
		help: "rendezvous settings: join_timeout=SECONDS (or timeout=), last_call_timeout=SECONDS (elastic --nnodes, default 30); torchrun's other keys are accepted and ignored",
		set:  func(o *cliOpts, v string) error { o.rdzvConf = v; return nil }},
	{name: "rdzv-timeout", env: []string{"DETCOLL_RDZV_TIMEOUT"}, arg: "DURATION",
		help: "how long nodes wait for each other before failing with the missing ones named (default 600s, torchrun's)",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.RdzvTimeout, err = parsePositiveDuration(v)
			return err
		}},
	{name: "standalone", env: []string{EnvStandalone, "PET_STANDALONE"},
		help: "single-node job, store on 127.0.0.1",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.Standalone, err = boolValue(v)
			return err
		}},
	{name: "max-restarts", env: []string{"DETCOLL_MAX_RESTARTS", "PET_MAX_RESTARTS"}, arg: "N",
		help: "restart the whole worker group (every node's) up to N times after a worker failure",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.MaxRestarts, err = intValue(v, 0)
			return err
		}},
	{name: "monitor-interval", env: []string{"DETCOLL_MONITOR_INTERVAL", "PET_MONITOR_INTERVAL"}, arg: "SECONDS",
		help: "accepted for torchrun; detcoll reacts to worker exits at once and uses it as the node heartbeat period",
		set: func(o *cliOpts, v string) (err error) {
			o.monitor, err = parsePositiveDuration(v)
			return err
		}},
	{name: "start-method", env: []string{"DETCOLL_START_METHOD", "PET_START_METHOD"}, arg: "spawn|fork|forkserver",
		help: "accepted for torchrun; workers are always new processes",
		set: func(o *cliOpts, v string) error {
			if !slices.Contains([]string{"spawn", "fork", "forkserver"}, v) {
				return fmt.Errorf("%q is not spawn, fork or forkserver", v)
			}
			o.startMethod = v
			return nil
		}},
	{name: "role", env: []string{"DETCOLL_ROLE", "PET_ROLE"}, arg: "NAME",
		help: "worker role (ROLE_NAME); default default",
		set: func(o *cliOpts, v string) error {
			if v == "" {
				return errors.New("empty role")
			}
			o.cfg.Role = v
			return nil
		}},
	{name: "module", short: "m", env: []string{"DETCOLL_MODULE", "PET_MODULE"},
		help: "run the command as a Python module: python3 -u -m CMD ARGS",
		set: func(o *cliOpts, v string) (err error) {
			o.module, err = boolValue(v)
			return err
		}},
	{name: "no-python", env: []string{"DETCOLL_NO_PYTHON", "PET_NO_PYTHON"},
		help: "execute the command directly even if it ends in .py",
		set: func(o *cliOpts, v string) (err error) {
			o.noPython, err = boolValue(v)
			return err
		}},
	{name: "run-path", env: []string{"DETCOLL_RUN_PATH", "PET_RUN_PATH"},
		help: "run the command as a Python script (python3 -u CMD ARGS), whatever its name",
		set: func(o *cliOpts, v string) (err error) {
			o.run, err = boolValue(v)
			return err
		}},
	{name: "log-dir", env: []string{"DETCOLL_LOG_DIR", "PET_LOG_DIR"}, arg: "DIR",
		help: "write worker output to DIR/RDZV_ID/attempt_N/LOCAL_RANK/{stdout,stderr}.log for --redirects and --tee",
		set:  func(o *cliOpts, v string) error { o.cfg.LogDir = v; return nil }},
	{name: "redirects", short: "r", env: []string{"DETCOLL_REDIRECTS", "PET_REDIRECTS"}, arg: "S|LR:S,…",
		help: "send streams to log files instead of the console: 0 none, 1 stdout, 2 stderr, 3 both; per local rank as 0:1,1:2",
		set:  func(o *cliOpts, v string) error { o.redirects = v; return nil }},
	{name: "tee", short: "t", env: []string{"DETCOLL_TEE", "PET_TEE"}, arg: "S|LR:S,…",
		help: "copy streams to log files and the console (format of --redirects)",
		set:  func(o *cliOpts, v string) error { o.tee = v; return nil }},
	{name: "local-ranks-filter", env: []string{"DETCOLL_LOCAL_RANKS_FILTER", "PET_LOCAL_RANKS_FILTER"}, arg: "LR,…",
		help: "show only these local ranks' output on the console (log files keep all)",
		set:  func(o *cliOpts, v string) error { o.filters = v; return nil }},
	{name: "bind-to", env: []string{EnvBindTo}, arg: "auto|none|core",
		help: "bind workers to this node's CPUs: core gives each its share (round robin when they outnumber the CPUs), none leaves it to the kernel, auto (default) binds when the workers outnumber the CPUs",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.BindTo, err = ParseBinding(v)
			return err
		}},
	{name: "local-addr", env: []string{tcpHostEnv, "PET_LOCAL_ADDR"}, arg: "IP",
		help: "address this node's workers listen on and advertise (" + tcpHostEnv + "); default: the interface that routes to --master-addr",
		set:  func(o *cliOpts, v string) error { o.cfg.TCPHost = v; return nil }},
	{name: "token", env: []string{EnvToken}, arg: "SECRET",
		help: "the store's secret; node 0 generates and prints one when several nodes have none (prefer the variable: it stays out of ps)",
		set:  func(o *cliOpts, v string) error { o.cfg.Token = v; return nil }},
	{name: "grace-period", env: []string{EnvGracePeriod}, arg: "DURATION",
		help: "time between SIGTERM and SIGKILL when stopping workers (default 5s)",
		set: func(o *cliOpts, v string) (err error) {
			o.cfg.GracePeriod, err = parsePositiveDuration(v)
			return err
		}},
}

// tcpHostEnv is transport/tcp's EnvHost (not imported: launch sits below
// the transports).
const tcpHostEnv = "DETCOLL_TCP_HOST"

// aliases of flags beyond the underscore spellings.
var flagAliases = map[string]string{"tcp-host": "local-addr"}

func lookupFlag(name string) *flagSpec {
	name = strings.ReplaceAll(name, "_", "-")
	if a, ok := flagAliases[name]; ok {
		name = a
	}
	for i := range launchFlags {
		if launchFlags[i].name == name {
			return &launchFlags[i]
		}
	}
	return nil
}

func lookupShort(s string) *flagSpec {
	for i := range launchFlags {
		if launchFlags[i].short == s {
			return &launchFlags[i]
		}
	}
	return nil
}

// usageError marks a Config error found by ParseArgs as a usage error
// without changing its text.
type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{e.err, ErrUsage} }

func usageErr(format string, args ...any) error {
	return fmt.Errorf("launch: %w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// ParseArgs parses `detcoll launch`'s command line as torchrun does: flags
// (with dashes or underscores: --nproc-per-node, --nproc_per_node) up to
// the first argument that is not one, which starts the worker command ("--"
// may also end the flags). A flag that is absent is read from its
// environment variables through getenv (DETCOLL_… first, then torchrun's
// PET_…), so the command line wins. Every value is checked before anything
// starts; an error wraps ErrUsage and names the flag or variable.
func ParseArgs(args []string, getenv func(string) string) (Config, error) {
	o := &cliOpts{seen: map[string]string{}}
	i := 0
	given := map[string]bool{}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "-h" || a == "--help" {
			return Config{}, ErrHelp
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break // the worker command
		}
		var f *flagSpec
		var val string
		hasVal := false
		shown := a
		if strings.HasPrefix(a, "--") {
			name, v, eq := strings.Cut(a[2:], "=")
			f = lookupFlag(name)
			if f == nil {
				return Config{}, usageErr("unknown flag --%s%s", name, suggest(name))
			}
			val, hasVal, shown = v, eq, "--"+name
		} else {
			s := a[1:2]
			f = lookupShort(s)
			if f == nil {
				return Config{}, usageErr("unknown flag %s (a worker command starts at the first argument that is not a flag)", a)
			}
			if len(a) > 2 {
				val, hasVal = strings.TrimPrefix(a[2:], "="), true
			}
			shown = "-" + s
		}
		if f.arg != "" && !hasVal {
			if i+1 >= len(args) {
				return Config{}, usageErr("%s needs a value (%s)", shown, f.arg)
			}
			i++
			val = args[i]
		}
		if f.arg == "" && hasVal && f.short != "" && !strings.HasPrefix(a, "--") {
			return Config{}, usageErr("%s takes no value", shown)
		}
		if err := f.set(o, val); err != nil {
			return Config{}, usageErr("%s: %v", shown, err)
		}
		given[f.name] = true
	}
	for fi := range launchFlags {
		f := &launchFlags[fi]
		if given[f.name] {
			continue
		}
		for _, e := range f.env {
			v := strings.TrimSpace(getenv(e))
			if v == "" {
				continue
			}
			if err := f.set(o, v); err != nil {
				return Config{}, usageErr("%s=%q (for --%s): %v", e, v, f.name, err)
			}
			break
		}
	}
	return o.finish(args[i:], getenv)
}

// finish turns the parsed options and the worker command into a Config.
func (o *cliOpts) finish(cmd []string, getenv func(string) string) (Config, error) {
	c := o.cfg
	if err := o.applyRendezvous(&c); err != nil {
		return Config{}, err
	}
	if o.monitor > 0 {
		c.MonitorInterval = o.monitor
	}
	if err := o.applyStreams(&c); err != nil {
		return Config{}, err
	}
	var err error
	if c.Cmd, err = o.workerCmd(cmd, getenv); err != nil {
		return Config{}, err
	}
	if c.MinNodes == c.Nnodes {
		c.MinNodes = 0 // not elastic: the Config default
	}
	if c.RdzvBackend == "c10d" && !o.nodeRankSet {
		c.AssignNodeRank = true // torchrun's c10d assigns node ranks
	}
	if c.Nnodes > 1 && c.MasterPort == 0 && o.rdzvEndpoint == "" {
		// torchrun's static default; with an endpoint (c10d) node 0
		// picks a free MASTER_PORT, as torchrun's agent does.
		c.MasterPort = DefaultMasterPort
	}
	if _, err := c.normalize(); err != nil {
		return Config{}, usageError{err}
	}
	return c, nil
}

// applyRendezvous sets c's rendezvous from --rdzv-endpoint, --rdzv-conf
// and an elastic --nnodes.
func (o *cliOpts) applyRendezvous(c *Config) error {
	if o.rdzvEndpoint != "" {
		host, port, err := splitEndpoint(o.rdzvEndpoint)
		if err != nil {
			return usageErr("--rdzv-endpoint %q: %v", o.rdzvEndpoint, err)
		}
		if c.MasterAddr != "" && !sameHost(c.MasterAddr, host) {
			// --master-addr and the endpoint's host both name node 0.
			return usageErr("--rdzv-endpoint host %q differs from --master-addr %q (both name node 0)", host, c.MasterAddr)
		}
		c.MasterAddr = host
		if c.StorePort == 0 {
			c.StorePort = port
		}
	}
	if o.rdzvConf != "" {
		rc, err := ParseRdzvConf(o.rdzvConf)
		if err != nil {
			return usageErr("--rdzv-conf: %v", err)
		}
		if rc.JoinTimeout > 0 && c.RdzvTimeout == 0 {
			c.RdzvTimeout = rc.JoinTimeout
		}
		c.LastCallTimeout = rc.LastCallTimeout
	}
	if c.MinNodes < c.Nnodes {
		if o.nodeRankSet {
			// torchrun's elastic rendezvous (c10d) assigns node ranks.
			return usageErr("--node-rank: an elastic --nnodes %d:%d assigns node ranks in join order; drop --node-rank", c.MinNodes, c.Nnodes)
		}
		c.AssignNodeRank = true
	}
	return nil
}

// applyStreams sets c's output options from --redirects, --tee and
// --local-ranks-filter.
func (o *cliOpts) applyStreams(c *Config) error {
	var err error
	if c.Redirects, err = ParseStreams(o.redirects); err != nil {
		return usageErr("--redirects: %v", err)
	}
	if c.Tee, err = ParseStreams(o.tee); err != nil {
		return usageErr("--tee: %v", err)
	}
	if o.filters != "" {
		if c.LocalRanksFilter, err = parseRankList(o.filters); err != nil {
			return usageErr("--local-ranks-filter: %v", err)
		}
	}
	return nil
}

// workerCmd is the command each worker runs: cmd, under Python for -m,
// --run-path or a .py script (unless --no-python).
func (o *cliOpts) workerCmd(cmd []string, getenv func(string) string) ([]string, error) {
	if len(cmd) == 0 {
		return nil, usageErr("no worker command (usage: detcoll launch [flags] CMD ARGS...)")
	}
	switch {
	case o.module && o.noPython:
		return nil, usageErr("-m/--module and --no-python exclude each other")
	case o.module && o.run:
		return nil, usageErr("-m/--module and --run-path exclude each other")
	}
	python := strings.TrimSpace(getenv(EnvPython))
	if python == "" {
		python = "python3"
	}
	switch {
	case o.module:
		return append([]string{python, "-u", "-m"}, cmd...), nil
	case o.run:
		return append([]string{python, "-u"}, cmd...), nil
	case !o.noPython && strings.HasSuffix(cmd[0], ".py"):
		return append([]string{python, "-u"}, cmd...), nil // torchrun's default for a script
	default:
		return slices.Clone(cmd), nil
	}
}

func splitEndpoint(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		// host alone
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(s, "[]"), DefaultRdzvPort, nil
		}
		return "", 0, err
	}
	if host == "" {
		return "", 0, errors.New("no host")
	}
	p, err := parsePort(port)
	return host, p, err
}

func sameHost(a, b string) bool {
	ia, ib := net.ParseIP(a), net.ParseIP(b)
	return a == b || (ia != nil && ib != nil && ia.Equal(ib))
}

// suggest proposes the closest known flag for a misspelt one.
func suggest(name string) string {
	name = strings.ReplaceAll(name, "_", "-")
	best, bestD := "", 4
	for _, f := range launchFlags {
		if d := editDistance(name, f.name); d < bestD {
			best, bestD = f.name, d
		}
	}
	if best == "" {
		return " (a worker command starts at the first argument that is not a flag)"
	}
	return fmt.Sprintf(" (did you mean --%s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// PrintUsage writes `detcoll launch`'s flags, each with its variables.
func PrintUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: detcoll launch [flags] CMD [ARGS...]

Starts --nproc-per-node workers on this node with torchrun's environment and
detcoll's. Flags end at the first argument that is not a flag (or at "--");
underscores may replace dashes (--nproc_per_node). An absent flag is read
from the variables shown, in order. See docs/launcher.md.

Flags:
`)
	for _, f := range launchFlags {
		name := "--" + f.name
		if f.short != "" {
			name = "-" + f.short + ", " + name
		}
		if f.arg != "" {
			name += " " + f.arg
		}
		fmt.Fprintf(w, "  %s\n      %s [%s]\n", name, f.help, strings.Join(f.env, ", "))
	}
}
