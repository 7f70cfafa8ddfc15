package launch

import (
	"slices"
)

// blame names the root cause of a failed job from what this node saw, once
// every local worker has exited; first is the first worker that failed on
// its own. In order:
//
//  1. a worker killed by a signal the launcher had not sent (kill -9 from
//     outside, a crash), the earliest one reaped;
//  2. a worker that was stopped (SIGSTOP, a debugger) when the first
//     failure came: it is why the others timed out;
//  3. the rank reached by following, from first, the peer that each
//     failing worker's FailureMarker line names, until a rank that did not
//     fail on its own (it stopped answering; possibly on another node) or
//     that failed without naming a peer;
//  4. first.
//
// A cycle in step 3 (two ranks naming each other) falls back to step 4.
func (j *job) blame(first *worker) *WorkerError {
	marks := map[int]Failure{}
	for _, w := range j.workers {
		if f, ok := w.out.failure(); ok && f.Kind != KindCanceled && f.Rank == w.rank {
			marks[w.rank] = f
		}
	}
	namedBy := func(r int) []int {
		var out []int
		for rank, f := range marks {
			if f.Peer == r && rank != r {
				out = append(out, rank)
			}
		}
		slices.Sort(out)
		return out
	}
	var killed *worker
	for _, w := range j.workers {
		if w.state != nil && w.signalledBySelf() && (killed == nil || w.exitSeq < killed.exitSeq) {
			killed = w
		}
	}
	if killed != nil {
		e := j.workerError(killed)
		e.NamedBy = namedBy(killed.rank)
		return e
	}
	for _, w := range j.workers {
		if w.stopped {
			e := j.workerError(w)
			e.Stopped, e.NamedBy = true, namedBy(w.rank)
			return e
		}
	}
	r, seen := first.rank, map[int]bool{}
	for {
		seen[r] = true
		f, ok := marks[r]
		if !ok || f.Peer < 0 || f.Peer >= j.world {
			break
		}
		if seen[f.Peer] {
			r = first.rank // a cycle proves nothing
			break
		}
		r = f.Peer
	}
	if r == first.rank {
		return j.workerError(first)
	}
	c := &j.cfg
	if node := r / c.NprocPerNode; node != c.NodeRank {
		e := &WorkerError{Rank: r, NodeRank: node, LocalRank: r % c.NprocPerNode, ExitStatus: -1,
			Remote: true, Unresponsive: true, NamedBy: namedBy(r)}
		return e // supervise asks that node, or learns it is lost
	}
	w := j.workers[r%c.NprocPerNode]
	e := j.workerError(w)
	e.NamedBy = namedBy(r)
	if _, own := marks[r]; !own && (w.state == nil || !w.state.Success()) {
		e.Unresponsive = true // it never said why: it hung, and was stopped
	}
	return e
}
