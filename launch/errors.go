package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// WorkerError is the root cause of a failed job: the first worker that
// failed on its own. Workers stopped by the launcher because of it are not
// reported.
type WorkerError struct {
	Rank      int // global rank
	LocalRank int
	NodeRank  int
	Pid       int
	// ExitStatus is the worker's exit status, or -1 if a signal killed it.
	ExitStatus int
	// Signal is the signal that killed the worker, or 0.
	Signal syscall.Signal
	// Tail holds the worker's last output lines (stdout and stderr in
	// arrival order, without the rank prefix), at most TailLines.
	Tail []string
	// Remote is true when the worker ran on another node of the job.
	Remote bool
}

func (e *WorkerError) Error() string {
	how := fmt.Sprintf("exited with status %d", e.ExitStatus)
	if e.Signal != 0 {
		how = fmt.Sprintf("was killed by signal %d (%v)", int(e.Signal), e.Signal)
	}
	return fmt.Sprintf("launch: rank %d (node %d, local rank %d, pid %d) %s", e.Rank, e.NodeRank, e.LocalRank, e.Pid, how)
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
