package devcomm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/detcoll/detcoll/gpu/devrt"
)

// Bounded host waits for device work. A dead peer leaves NCCL's kernels
// (and the peer-memory kernels until their own timeout) spinning, so a
// plain cuStreamSynchronize could wait forever: every wait here polls the
// stream and, between polls, NCCL's asynchronous error, the peer-memory
// error word and the abort flag, up to a deadline. On the deadline the
// communicator aborts NCCL and its kernels and poisons itself.

// ErrWaitTimeout is the cause (wrapped, with the context's error) when
// device work did not complete within the wait bound: a peer died or
// stopped calling, or a kernel hangs. The communicator is then aborted and
// poisoned.
var ErrWaitTimeout = errors.New("device work did not complete within the wait bound")

// streamQuerier is the runtime's non-blocking stream poll
// (cuStreamQuery / hipStreamQuery). Runtimes without it are waited on by a
// StreamSynchronize in another goroutine, abandoned on the deadline.
type streamQuerier interface {
	StreamQuery(s devrt.Stream) (done bool, err error)
}

// probe is what one wait polls; nil members are skipped.
type probe struct {
	done     func() (bool, error) // the device work has completed
	asyncErr func() error         // the collective library's asynchronous error
	devErr   func() error         // an error a peer-memory kernel recorded
	aborted  func() bool          // Abort was called
}

// Poll intervals: short first (a collective often finishes within
// microseconds), then backing off so that a long wait costs little CPU.
const (
	pollMin = 20 * time.Microsecond
	pollMax = 2 * time.Millisecond
)

// waitBounded polls p until the work is done (nil), a check fails (its
// error), Abort is called (ErrAborted) or ctx ends (ErrWaitTimeout wrapping
// ctx's error). It never blocks in the runtime.
func waitBounded(ctx context.Context, p probe) error {
	d := pollMin
	for {
		done, err := p.done()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if p.aborted != nil && p.aborted() {
			return ErrAborted
		}
		if p.asyncErr != nil {
			if err := p.asyncErr(); err != nil {
				return fmt.Errorf("the collective library failed asynchronously: %w", err)
			}
		}
		if p.devErr != nil {
			if err := p.devErr(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrWaitTimeout, ctx.Err())
		case <-time.After(d):
		}
		d = min(2*d, pollMax)
	}
}

// streamDone is p.done for stream s: cuStreamQuery when the runtime has
// it, else a StreamSynchronize in a goroutine (started on the first poll).
func (c *Comm) streamDone(s Stream) func() (bool, error) {
	if q, ok := c.rt.(streamQuerier); ok {
		return func() (done bool, err error) {
			err = c.dev.Do(func() (err error) {
				done, err = q.StreamQuery(s)
				return err
			})
			return done, err
		}
	}
	var ch chan error
	return func() (bool, error) {
		if ch == nil {
			ch = make(chan error, 1)
			go func() { ch <- c.dev.Synchronize(s) }()
		}
		select {
		case err := <-ch:
			ch <- err // later polls see it again
			return err == nil, err
		default:
			return false, nil
		}
	}
}

// asyncError is ncclCommGetAsyncError, nil when there is no communicator.
func (c *Comm) asyncError() error {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	if c.asyncErrHook != nil && !c.aborted.Load() {
		return c.asyncErrHook()
	}
	if c.nc == nil || c.aborted.Load() {
		return nil
	}
	return c.dev.Do(func() error { return c.nc.AsyncError() })
}

// ipcFailed is the error a peer-memory kernel recorded, or nil.
func (c *Comm) ipcFailed() error {
	c.abortMu.Lock()
	defer c.abortMu.Unlock()
	return c.ipc.failed()
}

// waitStream waits for s, bounded by ctx, polling NCCL's asynchronous error
// and the peer-memory error word; on any failure other than a local
// runtime error it aborts the communicator (NCCL and the kernels), so that
// the stream drains and peers fail fast. Needs neither lock held on entry
// except as its callers document.
func (c *Comm) waitStream(ctx context.Context, s Stream) error {
	err := waitBounded(ctx, probe{done: c.streamDone(s), asyncErr: c.asyncError, devErr: c.ipcFailed, aborted: c.aborted.Load})
	if err != nil && !errors.Is(err, ErrAborted) {
		_ = c.Abort()
	}
	return err
}

// Synchronize waits on the host for the work queued on the communicator's
// own stream, at most the wait bound (WithWaitTimeout). It also reports
// (and poisons the communicator with) a failure that a peer-memory kernel
// recorded, such as ErrIPCTimeout, NCCL's asynchronous error, or
// ErrWaitTimeout when the work did not complete in time (then NCCL is
// aborted).
func (c *Comm) Synchronize() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.waitTimeout())
	defer cancel()
	return c.SynchronizeCtx(ctx)
}

// SynchronizeCtx is Synchronize bounded by ctx instead of the wait bound.
// It holds no lock while it waits, so Abort from another goroutine ends it.
// On a poisoned communicator it returns the poisoning error at once (its
// NCCL communicator was aborted when it was poisoned).
func (c *Comm) SynchronizeCtx(ctx context.Context) error {
	const op = "Synchronize"
	c.mu.Lock()
	if err := c.usable(op); err != nil {
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	werr := c.waitStream(ctx, c.stream)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ipcCheck(op); err != nil {
		return err
	}
	if werr != nil {
		return c.fail(op, werr)
	}
	return nil
}

// AsyncError asks NCCL whether the communicator has failed asynchronously
// (a peer died, a network error): nil while healthy. A failure poisons the
// communicator.
func (c *Comm) AsyncError() error {
	const op = "AsyncError"
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.errClosed(op)
	}
	c.abortMu.Lock()
	nc := c.nc
	c.abortMu.Unlock()
	if nc == nil {
		if c.poison != nil {
			return c.usable(op)
		}
		return c.errClosed(op)
	}
	if err := c.asyncError(); err != nil {
		return c.fail(op, err)
	}
	if c.aborted.Load() {
		return c.usable(op)
	}
	return nil
}
