package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WorkerError is the root cause of a failed job: the worker that failed
// first on its own, or the one the evidence blames (see the package doc's
// blame rules). Workers stopped by the launcher because of it are not
// reported.
type WorkerError struct {
	Rank      int // global rank
	LocalRank int
	NodeRank  int
	Pid       int // 0 when the worker ran on another node and is not known
	// ExitStatus is the worker's exit status, or -1 if a signal killed it
	// (or, with Remote and Unresponsive, if nothing is known of its exit).
	ExitStatus int
	// Signal is the signal that killed the worker, or 0.
	Signal syscall.Signal
	// ByLauncher is true when Signal is one the launcher sent it while
	// stopping the job (so Signal says nothing about the cause).
	ByLauncher bool `json:",omitempty"`
	// Stopped is true when the worker was stopped (SIGSTOP, a debugger)
	// when the first other worker failed.
	Stopped bool `json:",omitempty"`
	// Unresponsive is true when the worker did not fail on its own but the
	// failing workers named it as the peer they were waiting on.
	Unresponsive bool `json:",omitempty"`
	// NodeLost is true when the worker's node stopped answering (host down,
	// network cut, launcher killed).
	NodeLost bool `json:",omitempty"`
	// NamedBy lists the ranks whose failure report names this rank as the
	// peer of their failing operation.
	NamedBy []int `json:",omitempty"`
	// Detail is the worker's own error from its FailureMarker line.
	Detail string `json:",omitempty"`
	// Tail holds the worker's last output lines (stdout and stderr in
	// arrival order, without the rank prefix), at most TailLines.
	Tail []string
	// Remote is true when the worker ran on another node of the job.
	Remote bool
}

func (e *WorkerError) Error() string {
	var how string
	switch {
	case e.NodeLost:
		how = fmt.Sprintf("is gone with node %d: that node stopped answering (host down, network cut, or its launcher killed)", e.NodeRank)
	case e.Stopped:
		how = "was stopped (SIGSTOP or a debugger) and stopped answering"
	case e.Signal != 0 && !e.ByLauncher:
		how = fmt.Sprintf("was killed by signal %d (%v)", int(e.Signal), e.Signal)
	case e.Unresponsive:
		how = "stopped answering"
		if e.Signal != 0 {
			how += " (the launcher then stopped it)"
		}
	case e.Signal != 0:
		how = fmt.Sprintf("was killed by signal %d (%v) from the launcher", int(e.Signal), e.Signal)
	default:
		how = fmt.Sprintf("exited with status %d", e.ExitStatus)
	}
	pid := ""
	if e.Pid > 0 {
		pid = fmt.Sprintf(", pid %d", e.Pid)
	}
	s := fmt.Sprintf("launch: rank %d (node %d, local rank %d%s) %s", e.Rank, e.NodeRank, e.LocalRank, pid, how)
	if len(e.NamedBy) > 0 {
		their := "their operations"
		if len(e.NamedBy) == 1 {
			their = "its operation"
		}
		s += fmt.Sprintf("; rank%s %s named it as the peer %s failed on", plural(len(e.NamedBy)), joinInts(e.NamedBy), their)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// Report is Error followed by the output tail, for a human.
func (e *WorkerError) Report() string {
	var b strings.Builder
	b.WriteString(e.Error())
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "\nlast %d lines of rank %d:", len(e.Tail), e.Rank)
		for _, l := range e.Tail {
			fmt.Fprintf(&b, "\n[rank %d] %s", e.Rank, l)
		}
	}
	return b.String()
}

// NodeLostError reports a node whose heartbeat stopped while the job ran.
type NodeLostError struct {
	Node      int
	FirstRank int // the node's ranks are FirstRank … FirstRank+Ranks-1
	Ranks     int
	Silent    time.Duration // how long no heartbeat came
}

func (e *NodeLostError) Error() string {
	return fmt.Sprintf("launch: node %d (ranks %s) is gone: no heartbeat for %v (host down, network cut, or its launcher killed)",
		e.Node, rankRange(e.FirstRank, e.Ranks), e.Silent.Round(100*time.Millisecond))
}

func rankRange(first, n int) string {
	if n == 1 {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, first+n-1)
}

// ErrRendezvousTimeout is wrapped by the error of a node whose peers did not
// all join within Config.RdzvTimeout.
var ErrRendezvousTimeout = errors.New("rendezvous timed out")

// RendezvousTimeoutError names the nodes that had not joined when the
// rendezvous timed out.
type RendezvousTimeoutError struct {
	Node         int           // the node reporting
	Timeout      time.Duration // Config.RdzvTimeout
	Missing      []int         // nodes that never joined
	NprocPerNode int
	Store        string // the store's address
	Reason       string // set when the store itself was never reached
}

func (e *RendezvousTimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "launch: node %d: %v after %v", e.Node, ErrRendezvousTimeout, e.Timeout)
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	for i, n := range e.Missing {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "node %d (ranks %s)", n, rankRange(n*e.NprocPerNode, e.NprocPerNode))
	}
	if len(e.Missing) > 0 {
		b.WriteString(" never joined")
	}
	fmt.Fprintf(&b, " (store %s; raise --rdzv-timeout or start the missing nodes with the same --nnodes, --master-addr, --master-port and token)", e.Store)
	return b.String()
}

func (e *RendezvousTimeoutError) Unwrap() error { return ErrRendezvousTimeout }

// InterruptedError reports a job stopped by a signal on Config.Signals or by
// its context.
type InterruptedError struct {
	Signal os.Signal // the signal; nil if the context stopped the job
	Err    error     // the context's error when Signal is nil
}

func (e *InterruptedError) Error() string {
	if e.Signal != nil {
		return fmt.Sprintf("launch: interrupted by signal %v", e.Signal)
	}
	return fmt.Sprintf("launch: interrupted: %v", e.Err)
}

func (e *InterruptedError) Unwrap() error { return e.Err }

// ErrAborted is wrapped by the error of a node that stopped because another
// node aborted the job for a reason other than a worker failure (that one is
// a *WorkerError with Remote set).
var ErrAborted = errors.New("job aborted by another node")

// RegroupError is an elastic attempt's end when nodes are waiting to join
// it: node 0 saw them while the group ran with fewer than MAX nodes and
// stopped the group, and every node then starts the next attempt, whose
// admission takes them in. Run handles it (it is not a failure and does
// not count against MaxRestarts); it only escapes Run if the context ends.
type RegroupError struct {
	Node    int // the node that saw the waiting nodes (node 0)
	Nodes   int // nodes in the attempt that was stopped
	Waiting int // nodes waiting to join
	Nnodes  string
}

func (e *RegroupError) Error() string {
	return fmt.Sprintf("launch: node %d: %s", e.Node, e.what())
}

func (e *RegroupError) what() string {
	return fmt.Sprintf("%d node%s waiting to join the running group of %d node%s (--nnodes %s)",
		e.Waiting, plural(e.Waiting), e.Nodes, plural(e.Nodes), e.Nnodes)
}

// AbortError reports that node Node aborted the job, and why.
type AbortError struct {
	Node   int
	Reason string
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("launch: %v: node %d: %s", ErrAborted, e.Node, e.Reason)
}

func (e *AbortError) Unwrap() error { return ErrAborted }

// ExitCode maps an error of Run to a process exit status:
//
//   - nil: 0;
//   - *WorkerError: the worker's exit status, or 128+signal if a signal
//     killed it;
//   - *InterruptedError: 128+signal; 124 for an expired context deadline;
//     130 for a cancelled context;
//   - ErrInvalidConfig: 2;
//   - *StartError for a command that was not found: 127; not executable: 126;
//   - anything else: 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var we *WorkerError
	var ie *InterruptedError
	switch {
	case errors.As(err, &we):
		if we.Stopped || we.Unresponsive || we.NodeLost || we.ByLauncher {
			return 1
		}
		if we.Signal != 0 {
			return 128 + int(we.Signal)
		}
		if we.ExitStatus > 0 && we.ExitStatus < 256 {
			return we.ExitStatus
		}
		return 1
	case errors.As(err, &ie):
		if s, ok := ie.Signal.(syscall.Signal); ok && s > 0 {
			return 128 + int(s)
		}
		if errors.Is(ie.Err, context.DeadlineExceeded) {
			return 124
		}
		return 130
	case errors.Is(err, ErrInvalidConfig):
		return 2
	}
	var se *StartError
	if errors.As(err, &se) {
		switch {
		case errors.Is(se.Err, exec.ErrNotFound) || errors.Is(se.Err, fs.ErrNotExist):
			return 127
		case errors.Is(se.Err, fs.ErrPermission):
			return 126
		}
	}
	return 1
}

// StartError reports a worker that could not be started.
type StartError struct {
	Rank int
	Err  error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("launch: starting rank %d: %v", e.Rank, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// ErrRendezvousClosed is wrapped by the error of a node that reached an
// elastic job's store (--nnodes MIN:MAX) after its rendezvous had closed, or
// when MAX nodes had already joined: the job runs without it.
var ErrRendezvousClosed = errors.New("rendezvous closed")

// RendezvousClosedError reports a node turned away by an elastic
// rendezvous.
type RendezvousClosedError struct {
	RdzvID   string
	Store    string
	Nnodes   string // --nnodes as given, MIN:MAX
	Admitted int    // nodes the rendezvous admitted; 0 if not known
	Full     bool   // MAX nodes had joined (the rendezvous was closing)
}

func (e *RendezvousClosedError) Error() string {
	how := "it had closed before this node joined"
	if e.Full {
		how = "it was full (the most nodes --nnodes " + e.Nnodes + " admits had joined)"
	}
	adm := ""
	if e.Admitted > 0 {
		adm = fmt.Sprintf(" with %d node%s", e.Admitted, plural(e.Admitted))
	}
	return fmt.Sprintf("launch: %v: the rendezvous of job %q (store %s, --nnodes %s) admitted no more nodes: %s; the job runs%s, without this one (start this node with the next job, or raise MAX)",
		ErrRendezvousClosed, e.RdzvID, e.Store, e.Nnodes, how, adm)
}

func (e *RendezvousClosedError) Unwrap() error { return ErrRendezvousClosed }
