// Package launch starts the processes of a detcoll job and lets each of them
// find its place in the job.
//
// It has two halves: FromEnv and Rendezvous, which a worker calls to learn
// its rank and reach the job's store whatever launched it; and Run, a
// torchrun-like launcher that starts the workers of one node.
//
// # Environment discovery
//
// FromEnv reads the first complete set of variables among, in order:
//
//  1. detcoll's own, written by Run: DETCOLL_RANK, DETCOLL_WORLD_SIZE,
//     DETCOLL_LOCAL_RANK, DETCOLL_LOCAL_WORLD_SIZE, DETCOLL_STORE_ADDR,
//     DETCOLL_TOKEN (Source "detcoll");
//  2. torchrun's: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//     MASTER_ADDR, MASTER_PORT (Source "torchrun");
//  3. Slurm's: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
//     SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE (Source "slurm");
//  4. Open MPI's: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//     (Source "openmpi");
//
// and otherwise describes a world of one rank (Source "single", whose store
// is DETCOLL_STORE_ADDR if set, else an in-memory one). A source is selected
// by its rank or world-size variable being set; once selected, a malformed or
// inconsistent value (non-numeric, rank >= world size, local rank >= local
// world size, a missing store address when the world has more than one rank)
// is an error wrapping ErrInvalidEnv, never a silent fall-through to the next
// source. A missing local world size defaults to the world size, a missing
// local rank to rank mod local world size. DETCOLL_TOKEN is the store's
// token for every source.
//
// # The store port rule
//
// detcoll's store never takes torch's port. For torchrun, Slurm and Open MPI
// the store address is, in order of preference:
//
//   - DETCOLL_STORE_ADDR (host:port), if set;
//   - MASTER_ADDR:DETCOLL_STORE_PORT, if DETCOLL_STORE_PORT is set;
//   - MASTER_ADDR:(MASTER_PORT+1).
//
// So under torchrun --master-port=29500, torch's TCPStore owns 29500 and
// detcoll's store listens on 29501. A store address equal to
// MASTER_ADDR:MASTER_PORT is rejected, as is MASTER_PORT=65535 without an
// explicit store port. With Source "detcoll" the launcher has already chosen
// the address and DETCOLL_STORE_ADDR is used as is.
//
// # Rendezvous
//
// Rendezvous turns an Env into a connected store. Under Run the launcher
// serves the store and every rank, rank 0 included, only dials it. Under any
// other launcher nobody serves it, so rank 0 listens on the store address
// (on every interface, unless the address is a loopback one) and every rank,
// rank 0 included, dials it (Env.ServesStore says which case applies). A
// world of one rank without a store address gets an in-memory store. The
// returned closer disconnects; on a rank 0 that serves the store it first
// waits (up to CloseTimeout) for every rank to have called its closer, so
// that the store outlives its last user.
//
// # The launcher
//
// ParseArgs reads `detcoll launch`'s command line with torchrun's grammar
// and flags (see docs/launcher.md for the table); Run starts
// Config.NprocPerNode copies of Config.Cmd on this node. Node 0 (NodeRank 0)
// serves the store on MasterAddr:StorePort (MasterAddr must be one of its
// own addresses; the store binds it, never every interface). Workers get
// MASTER_PORT = Config.MasterPort exactly, free for torch; the store's port
// is StorePort, by default MasterPort+1 (the store port rule above), and
// workers find it in DETCOLL_STORE_ADDR. With MasterPort 0 node 0 picks a
// free torch port and hands it to the other nodes through the store.
//
// Global rank = NodeRank*NprocPerNode + local rank. Each worker gets, on top
// of Config.Env: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_USE_AGENT_STORE=False (no agent store
// listens on MASTER_PORT), TORCHELASTIC_ERROR_FILE when logs are written
// (torchrun's), DETCOLL_RANK, DETCOLL_WORLD_SIZE, DETCOLL_LOCAL_RANK,
// DETCOLL_LOCAL_WORLD_SIZE, DETCOLL_NODE_RANK, DETCOLL_NNODES,
// DETCOLL_STORE_ADDR, DETCOLL_TOKEN and DETCOLL_TCP_HOST (detcoll's; the
// address of this host that routes to MasterAddr, 127.0.0.1 on one node,
// or Config.TCPHost), GOMAXPROCS = the host's CPUs / NprocPerNode (at
// least 1; more than one worker per node whose collectives go over TCP:
// DETCOLL_TRANSPORT=tcp or more than one node), and torchrun's defaults
// OMP_NUM_THREADS=1 (more than one worker per node) and
// TORCH_NCCL_ASYNC_ERROR_HANDLING=1 /
// NCCL_ASYNC_ERROR_HANDLING=1 when unset. DETCOLL_STORE_PORT is removed.
//
// Each worker runs in its own process group, with no stdin; on Linux it is
// also SIGKILLed if the launcher dies without stopping it. Every line it
// writes to stdout or stderr is copied to Config.Stdout or Config.Stderr
// prefixed with "[rank N] ", one whole line per Write so ranks never
// interleave within a line. A last line without a newline is terminated;
// a line longer than MaxLineLen bytes is split into several prefixed lines.
// A line is forwarded once complete, so a partial line (a progress bar
// without newline) shows when its newline, or the worker's exit, comes.
// The exception is rank 0's stderr when Config.Stderr is a terminal
// (Config.StderrTerminal): rank 0 then gets EnvConsoleTTY=1, and its
// carriage-return updates are drawn at once, unprefixed, on the terminal's
// last line, with every other line written above them (console.go).
//
// Stopping: on the first failure of a worker (non-zero exit or death by
// signal), on ctx being done, on a signal arriving on Config.Signals, or on
// another node's failure, Run sends every live worker's process group SIGTERM
// (a signal from Config.Signals is forwarded as itself) and, GracePeriod
// later, SIGKILL. It returns once every worker has exited:
//
//   - nil if all exited 0;
//   - *WorkerError for the root cause, by the blame rules: a worker killed
//     by a signal Run did not send; else a worker found stopped (SIGSTOP)
//     at the first failure; else the rank reached by following the peers
//     named in the failing workers' FailureMarker lines (see ReportFailure)
//     to one that did not fail on its own; else the first rank that failed.
//     It carries the exit status or signal, the ranks that named it and its
//     last TailLines lines of output. Workers that die because Run stopped
//     them are never the root cause by their signal. With several nodes
//     every node reports the same root cause;
//   - *NodeLostError if another node's heartbeat stopped;
//   - *RendezvousTimeoutError if the nodes did not all join in time;
//   - *InterruptedError if ctx or a signal stopped the job first;
//   - *AbortError if another node aborted the job for another reason;
//   - *StartError if a worker could not be started;
//   - another error (wrapping ErrInvalidConfig for a bad Config, or from
//     the store) if the job could not be set up.
//
// ExitCode maps these to a process exit status for a command-line tool.
//
// Commands are expected to wire signals like this:
//
//	sigs := make(chan os.Signal, 4)
//	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
//	cfg.Signals = sigs
//	err := launch.Run(ctx, cfg)
//	os.Exit(launch.ExitCode(err))
//
// # Several nodes
//
// With Nnodes > 1 every node runs Run with the same Nnodes, NprocPerNode,
// MasterAddr, MasterPort, StorePort, RdzvID and Token and its own NodeRank.
// Node 0 without a token generates one and prints it on Config.Stderr; the
// other nodes refuse to start without one. Nodes meet in the
// store under the key prefix "detcoll/launch/": all nodes must join before
// any starts its workers, within RdzvTimeout (default 600 s, torchrun's;
// the error names the nodes that never came), and must agree on Nnodes,
// NprocPerNode, RdzvID and MasterPort; node 0 publishes the
// torch port; the first node to fail (a worker failure, an interruption, a
// bad config) publishes the root cause and every node stops its workers and
// returns it; a node whose workers all succeeded waits until every node has
// finished, so every node returns the job's outcome; node 0 keeps the store
// up until every node has left. A node that loses its connection to the
// store stops its workers, and so does a node whose peers' heartbeats (one
// per MonitorInterval) stop for six periods (at least 3 s). MaxRestarts
// restarts every node's worker group, node 0 serving a new store for each
// attempt.
//
// An elastic job (MinNodes < Nnodes, torchrun's --nnodes MIN:MAX) first
// admits its nodes, in join order, until Nnodes have joined or, once
// MinNodes have, until LastCallTimeout passes without a new one; it then
// runs as a fixed job of the admitted nodes. Each attempt admits anew. A
// node that comes while an attempt runs with fewer than Nnodes nodes waits
// (torchrun's scale-up): node 0 sees it within a second, stops the group
// on every node (a *RegroupError, handled by Run) and starts the next
// attempt, whose admission takes it in; this does not count against
// MaxRestarts. A node that comes while Nnodes run, or to a job that is not
// elastic, gets a *RendezvousClosedError (or a config error) at once.
package launch
