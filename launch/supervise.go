package launch

import (
	"context"
	"os"
	"runtime"
	"time"
)

// supervisor is one attempt's event loop state: why the job stopped, and
// how far stopping its workers has gone.
type supervisor struct {
	j           *job
	ctx         context.Context
	cause       error            // why the job stopped, if it did
	failed      *worker          // the first local worker that failed on its own
	published   chan error       // result of publishing a non-worker cause to other nodes
	stopping    bool             // the workers were signalled to stop
	killed      bool             // they were sent SIGKILL after the grace period
	killTimer   <-chan time.Time // fires when the grace period is over
	running     int              // workers not reaped yet
	reaped      int              // workers reaped so far
	remoteCause error            // another node's published root cause, once seen
}

// supervise starts the workers and runs the event loop until all exited.
func (j *job) supervise(ctx context.Context) error {
	n, release, startErr := j.startPinned()
	defer release()
	exits := j.reapAll()
	growCtx, stopGrow := context.WithCancel(ctx)
	defer stopGrow()
	grow := j.watchWaiting(growCtx)

	s := &supervisor{j: j, ctx: ctx, running: n}
	if startErr != nil {
		s.abort(startErr, abortRecord{Node: j.cfg.NodeRank, Reason: startErr.Error()})
		s.stop(sigTerm)
	}
	s.loop(exits, grow)
	j.drainAll()
	return s.result()
}

// startPinned starts the workers from a goroutine locked to its OS thread
// until release is called (the caller calls it when Run returns):
// Pdeathsig fires when the starting thread exits. It returns how many
// workers started.
func (j *job) startPinned() (int, func(), error) {
	type startResult struct {
		n   int
		err error
	}
	started := make(chan startResult, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		n, err := j.startAll()
		started <- startResult{n, err}
		<-release
		if !j.boundThread {
			// A thread still bound to a worker's CPUs exits with this
			// goroutine instead of running others.
			runtime.UnlockOSThread()
		}
	}()
	res := <-started
	return res.n, func() { close(release) }, res.err
}

// reapAll waits for every started worker, reporting each exit on the
// channel it returns.
func (j *job) reapAll() <-chan exitEvent {
	exits := make(chan exitEvent, j.cfg.NprocPerNode)
	for _, w := range j.workers {
		go func() {
			_ = w.cmd.Wait() // the status is in ProcessState
			exits <- exitEvent{w: w, state: w.cmd.ProcessState}
		}()
	}
	return exits
}

// loop handles events until every worker was reaped.
func (s *supervisor) loop(exits <-chan exitEvent, grow <-chan int) {
	c := &s.j.cfg
	ctxDone, sigs := s.ctx.Done(), c.Signals
	var remote <-chan nodeEvent
	if s.j.nodes != nil {
		remote = s.j.nodes.events
	}
	for s.running > 0 {
		select {
		case ev := <-exits:
			s.reap(ev)
		case sig, ok := <-sigs:
			if !ok {
				sigs = nil // closed: no more signals
				continue
			}
			s.interrupted(sig)
		case <-ctxDone:
			ctxDone = nil
			s.cancelled()
		case ev := <-remote:
			s.remoteEvent(ev)
		case n := <-grow:
			grow = nil
			s.regroup(n)
		case <-s.killTimer:
			s.killTimer, s.killed = nil, true
			s.stop(sigKill)
		}
	}
}

// abort records cause as why the job stopped and publishes rec to the
// other nodes, if any.
func (s *supervisor) abort(cause error, rec abortRecord) {
	s.cause = cause
	if s.j.nodes != nil {
		s.published = make(chan error, 1)
		go func() { s.published <- s.j.nodes.publish(rec) }()
	}
}

// stop sends sig to every worker not yet reaped and, the first time,
// starts the grace period after which they are killed.
func (s *supervisor) stop(sig os.Signal) {
	for _, w := range s.j.workers {
		if !w.exited {
			w.sent = append(w.sent, sig)
			_ = signalGroup(w.cmd.Process, sig)
			if w.stopped && sig != sigKill && sigCont != nil {
				// A stopped worker only acts on sig once continued.
				_ = signalGroup(w.cmd.Process, sigCont)
			}
		}
	}
	if s.killTimer == nil && !s.killed {
		s.killTimer = time.After(s.j.cfg.GracePeriod)
	}
	s.stopping = true
}

// reap records a worker's exit; the first failure stops the others.
func (s *supervisor) reap(ev exitEvent) {
	s.running--
	s.reaped++
	ev.w.exited, ev.w.state, ev.w.exitSeq = true, ev.state, s.reaped
	if s.stopping || !ev.failed() {
		return
	}
	s.failed = ev.w
	// Which workers are stopped (SIGSTOP) now, before the launcher's own
	// signals change anything: the usual reason the others time out.
	for _, w := range s.j.workers {
		if !w.exited && processStopped(w.cmd.Process.Pid) {
			w.stopped = true
		}
	}
	s.stop(sigTerm)
}

// interrupted forwards a signal from Config.Signals to the workers.
func (s *supervisor) interrupted(sig os.Signal) {
	if !s.stopping {
		s.abort(&InterruptedError{Signal: sig}, abortRecord{Node: s.j.cfg.NodeRank, Reason: "interrupted by signal " + sig.String()})
	}
	s.stop(sig)
}

// cancelled stops the workers when Run's context is done.
func (s *supervisor) cancelled() {
	if s.stopping {
		return
	}
	err := s.ctx.Err()
	s.abort(&InterruptedError{Err: err}, abortRecord{Node: s.j.cfg.NodeRank, Reason: "interrupted: " + err.Error()})
	s.stop(sigTerm)
}

// remoteEvent handles news from the other nodes: another node's abort,
// or the store or a node lost.
func (s *supervisor) remoteEvent(ev nodeEvent) {
	self := s.j.cfg.NodeRank
	if ev.lost == nil && ev.lostNode == nil && ev.rec.Node != self {
		s.remoteCause = ev.err() // another node's root cause
	}
	if !s.stopping && (ev.lost != nil || ev.lostNode != nil || ev.rec.Node != self) {
		s.cause = ev.err()
		s.stop(sigTerm)
	}
}

// regroup stops the job so that the n nodes waiting to join can.
func (s *supervisor) regroup(n int) {
	if s.stopping {
		return
	}
	c := &s.j.cfg
	rg := &RegroupError{Node: c.NodeRank, Nodes: s.j.nnodes, Waiting: n, Nnodes: c.nnodesSpec()}
	s.abort(rg, abortRecord{Node: c.NodeRank, Reason: rg.Error(), Regroup: rg})
	s.stop(sigTerm)
}

// result is the error supervise returns once every worker was reaped and
// drained.
func (s *supervisor) result() error {
	j, c := s.j, &s.j.cfg
	cause := s.cause
	if s.failed != nil {
		cause = s.failureCause()
	} else if s.published != nil {
		if err := <-s.published; err != nil {
			cause = err
		}
	}
	if j.nodes != nil {
		cause = j.nodes.finish(s.ctx, c.Signals, cause, c.GracePeriod)
	}
	return cause
}

// failureCause is the job's cause when a local worker failed on its own:
// another node's root cause if one decided first (every node reports the
// same cause), else the blamed worker.
func (s *supervisor) failureCause() error {
	j, c := s.j, &s.j.cfg
	remoteCause := s.remoteCause
	if remoteCause == nil && j.nodes != nil {
		remoteCause = j.nodes.publishedCause()
	}
	if remoteCause != nil {
		return remoteCause
	}
	we := j.blame(s.failed)
	if j.nodes == nil {
		return we
	}
	var other error
	if we.Remote {
		// The blamed rank's own node saw more (a stop, a signal): give it
		// the time to stop its workers and say, unless its heartbeat shows
		// it is gone.
		other, we.NodeLost = j.nodes.awaitRemote(we.NodeRank, c.GracePeriod+drainTimeout+time.Second)
	}
	if other == nil {
		other = j.nodes.publish(abortRecord{Node: c.NodeRank, Worker: we})
	}
	if other != nil {
		return other // another node's root cause: every node reports it
	}
	return we
}
