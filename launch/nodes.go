package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/detcoll/detcoll/store"
)

// Keys of the launcher's protocol between nodes, under keyPrefix:
//
//	config        "nnodes=N nproc=P …", set by node 0, checked by the others
//	next_node     counter: join-order node ranks (c10d without --node-rank,
//	              elastic jobs; elastic.go)
//	nnodes        the number of nodes an elastic rendezvous admitted
//	torch_port    the MASTER_PORT node 0 picked for torch
//	node/<r>      counter: node r joined (twice is an error)
//	joined        counter; all_joined is set by the last node to join
//	abort_claim   counter; the node that brings it to 1 writes abort
//	abort         JSON abortRecord: the job's root cause
//	finished      counter of nodes whose workers are done; all_finished
//	left          counter of nodes done with the store; all_left
//	hb/<r>        counter: node r's heartbeat, one per MonitorInterval
//	waiting       counter: nodes that came after an elastic admission
//	              closed with fewer than MAX and wait for the next attempt
//
// After the N-th restart the keys are under keyPrefix+"attemptN/", in the
// new store node 0 serves for that attempt.
const keyPrefix = "detcoll/launch/"

// lostAfterBeats is how many heartbeat periods of silence make a node lost
// (at least minLost).
const (
	lostAfterBeats = 6
	minLost        = 3 * time.Second
)

// storeTimeout bounds one protocol operation that must not hang a stopping
// launcher (publishing a failure, reading one, leaving).
const storeTimeout = 10 * time.Second

// abortRecord is the root cause of a job, as published by the node that
// found it.
type abortRecord struct {
	Node   int          `json:"node"`
	Reason string       `json:"reason,omitempty"`
	Worker *WorkerError `json:"worker,omitempty"`
	// Regroup, when set, says the group stops to admit waiting nodes.
	Regroup *RegroupError `json:"regroup,omitempty"`
}

func (r abortRecord) err() error {
	if r.Regroup != nil {
		rg := *r.Regroup
		return &rg
	}
	if r.Worker != nil {
		w := *r.Worker
		w.Remote = true
		return &w
	}
	return &AbortError{Node: r.Node, Reason: r.Reason}
}

// nodeEvent is what the watcher saw: an abort record, or the loss of the
// store.
type nodeEvent struct {
	rec      abortRecord
	lost     error          // the store is gone
	lostNode *NodeLostError // another node's heartbeat stopped
	store    string
}

func (ev nodeEvent) err() error {
	if ev.lost != nil {
		return fmt.Errorf("launch: lost the job's store at %s (served by node 0: is it gone?): %w", ev.store, ev.lost)
	}
	if ev.lostNode != nil {
		return ev.lostNode
	}
	return ev.rec.err()
}

// nodes is this node's link to the others.
type nodes struct {
	client    *store.Client
	st        store.Store // client under keyPrefix
	addr      string      // the store's address
	node, n   int
	nproc     int
	beat      time.Duration
	events    chan nodeEvent // from the watcher and the heartbeat monitor
	stopWatch context.CancelFunc
	watchDone chan struct{}
	beatDone  chan struct{}

	mu       sync.Mutex
	lastBeat map[int]time.Time // when node r's heartbeat last moved
	lost     map[int]bool
}

func newNodes(cl *store.Client, addr, prefix string, node, n, nproc int, beat time.Duration) *nodes {
	ctx, cancel := context.WithCancel(context.Background())
	nd := &nodes{client: cl, st: store.Prefix(cl, prefix), addr: addr, node: node, n: n, nproc: nproc, beat: beat,
		events: make(chan nodeEvent, 2), stopWatch: cancel, watchDone: make(chan struct{}), beatDone: make(chan struct{}),
		lastBeat: map[int]time.Time{}, lost: map[int]bool{}}
	go nd.watch(ctx)
	return nd
}

// lostAfter is the silence that makes a node lost.
func (nd *nodes) lostAfter() time.Duration { return max(lostAfterBeats*nd.beat, minLost) }

// heartbeat runs after the rendezvous: it moves this node's counter every
// period and watches the others'; a node silent for lostAfter is reported
// once on events.
func (nd *nodes) heartbeat(ctx context.Context) {
	defer close(nd.beatDone)
	t := time.NewTicker(nd.beat)
	defer t.Stop()
	seen := map[int]int64{}
	start := time.Now()
	reported := false
	for {
		_, _ = nd.st.Add(ctx, "hb/"+strconv.Itoa(nd.node), 1)
		now := time.Now()
		for r := range nd.n {
			if r == nd.node {
				continue
			}
			v, err := nd.st.Add(ctx, "hb/"+strconv.Itoa(r), 0)
			if err != nil {
				break // the watcher reports a lost store
			}
			nd.mu.Lock()
			if last, ok := nd.lastBeat[r]; !ok || v != seen[r] {
				seen[r], nd.lastBeat[r] = v, now
				if !ok && v == 0 {
					nd.lastBeat[r] = start
				}
			} else if silent := now.Sub(last); silent >= nd.lostAfter() && !nd.lost[r] {
				nd.lost[r] = true
				if !reported {
					reported = true
					select {
					case nd.events <- nodeEvent{lostNode: &NodeLostError{Node: r, FirstRank: r * nd.nproc, Ranks: nd.nproc, Silent: silent}}:
					default:
					}
				}
			}
			nd.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// awaitRemote waits for node r to publish the job's root cause (returned)
// or to be found lost (lost true): up to d, or longer if the heartbeat
// monitor needs it to decide. A beat seen two periods after the call proves
// r alive; then only its record is awaited, until d.
func (nd *nodes) awaitRemote(r int, d time.Duration) (cause error, lost bool) {
	start := time.Now()
	// The monitor sees a silence lostAfter after the last beat it
	// observed, which may be a beat (and a tick) after the node died.
	lostBy := start.Add(nd.lostAfter() + 4*nd.beat + time.Second)
	deadline := start.Add(d)
	tick := time.NewTicker(max(nd.beat/2, 10*time.Millisecond))
	defer tick.Stop()
	for {
		nd.mu.Lock()
		isLost, last := nd.lost[r], nd.lastBeat[r]
		nd.mu.Unlock()
		alive := last.After(start.Add(2 * nd.beat))
		switch {
		case isLost:
			return nil, true
		case time.Now().After(deadline) && (alive || time.Now().After(lostBy)):
			return nil, false
		}
		select {
		case ev := <-nd.events:
			if ev.lost == nil && ev.lostNode == nil && ev.rec.Node != nd.node {
				return ev.err(), false
			}
			if ev.lost != nil {
				return nil, false
			}
		case <-tick.C:
		}
	}
}

// publishedCause returns the root cause another node already published,
// or nil.
func (nd *nodes) publishedCause() error {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if n, err := nd.st.Add(ctx, "abort_claim", 0); err != nil || n == 0 {
		return nil
	}
	rec, err := nd.readAbort(ctx)
	if err != nil || rec.Node == nd.node {
		return nil
	}
	return rec.err()
}

func (nd *nodes) lostCount() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return len(nd.lost)
}

// watch reports the abort record once it is published, or the loss of the
// store.
func (nd *nodes) watch(ctx context.Context) {
	defer close(nd.watchDone)
	err := nd.st.Wait(ctx, "abort")
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		nd.events <- nodeEvent{lost: err, store: nd.addr}
		return
	}
	rec, err := nd.readAbort(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		nd.events <- nodeEvent{lost: err, store: nd.addr}
		return
	}
	nd.events <- nodeEvent{rec: rec}
}

func (nd *nodes) readAbort(ctx context.Context) (abortRecord, error) {
	var rec abortRecord
	v, err := nd.st.Get(ctx, "abort")
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, fmt.Errorf("malformed abort record: %w", err)
	}
	return rec, nil
}

// publish makes rec the job's root cause unless another node got there
// first; then it returns that node's cause. Store errors leave the local
// cause standing (nil).
func (nd *nodes) publish(rec abortRecord) error {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	n, err := nd.st.Add(ctx, "abort_claim", 1)
	if err != nil {
		return nil
	}
	if n == 1 {
		data, _ := json.Marshal(rec)
		_ = nd.st.Set(ctx, "abort", data)
		return nil
	}
	other, err := nd.readAbort(ctx)
	if err != nil || other.Node == nd.node {
		return nil
	}
	return other.err()
}

// count adds one to counter key and sets all_<key> when it reaches n.
func (nd *nodes) count(ctx context.Context, key string) error {
	v, err := nd.st.Add(ctx, key, 1)
	if err == nil && v == int64(nd.n) {
		err = nd.st.Set(ctx, "all_"+key, nil)
	}
	return err
}

// confString is what every node of a job must agree on.
func (j *job) confString() string {
	c := &j.cfg
	return fmt.Sprintf("nnodes=%s nproc=%d rdzv_id=%s master_port=%d", c.nnodesSpec(), c.NprocPerNode, c.RdzvID, c.MasterPort)
}

// publishConfig is node 0's: the attempt (on root, not under a prefix),
// the job's config and the torch port (on st, the attempt's prefix), for
// the other nodes to check and learn.
func (j *job) publishConfig(ctx context.Context, root, st store.Store) error {
	// The failure count first: a node that reads the attempt finds it.
	if err := root.Set(ctx, failuresKey, []byte(strconv.Itoa(j.failures))); err != nil {
		return err
	}
	if err := root.Set(ctx, attemptKey, []byte(strconv.Itoa(j.attempt))); err != nil {
		return err
	}
	if err := st.Set(ctx, "config", []byte(j.confString())); err != nil {
		return err
	}
	return st.Set(ctx, "torch_port", []byte(strconv.Itoa(j.torchPort)))
}

// checkConfig compares this node's config with node 0's (on st, the
// attempt's prefix), waiting for node 0 to publish it.
func (j *job) checkConfig(ctx context.Context, st store.Store, node int) error {
	got, err := st.Get(ctx, "config")
	if err != nil {
		return err
	}
	if conf := j.confString(); string(got) != conf {
		who := "node " + strconv.Itoa(node)
		if node < 0 {
			who = "this node" // before its node rank is assigned
		}
		return fmt.Errorf("launch: %w: %s has %s but node 0 has %s", ErrInvalidConfig, who, conf, got)
	}
	return nil
}

// rendezvous runs the join protocol and learns j.torchPort.
func (nd *nodes) rendezvous(ctx context.Context, j *job) error {
	if nd.node == 0 {
		if err := j.publishConfig(ctx, nd.client, nd.st); err != nil {
			return err
		}
	}
	v, err := nd.st.Add(ctx, "node/"+strconv.Itoa(nd.node), 1)
	if err != nil {
		return err
	}
	if v > 1 {
		return fmt.Errorf("launch: %w: another node joined with NodeRank=%d", ErrInvalidConfig, nd.node)
	}
	if nd.node != 0 {
		if err := j.checkConfig(ctx, nd.st, nd.node); err != nil {
			return err
		}
		p, err := nd.st.Get(ctx, "torch_port")
		if err != nil {
			return err
		}
		if j.torchPort, err = parsePort(string(p)); err != nil {
			return fmt.Errorf("launch: torch port from node 0: %w", err)
		}
	}
	if err := nd.count(ctx, "joined"); err != nil {
		return err
	}
	return nd.st.Wait(ctx, "all_joined")
}

// finish runs after the local workers exited with the local outcome cause.
// A node whose workers all succeeded waits for every node to finish and
// adopts the job's root cause if there is one. Node 0 keeps the store up
// until every node has left, or for a bounded time after a failure.
func (nd *nodes) finish(ctx context.Context, sigs <-chan os.Signal, cause error, grace time.Duration) error {
	bg, cancel := context.WithTimeout(context.Background(), storeTimeout)
	_ = nd.count(bg, "finished")
	cancel()
	if cause == nil {
		cause = interruptible(ctx, sigs, nd.events, func(ctx context.Context) error {
			return nd.st.Wait(ctx, "all_finished")
		})
		var lost *NodeLostError
		if errors.As(cause, &lost) {
			_ = nd.publish(abortRecord{Node: nd.node, Reason: lost.Error()})
		}
		var ie *InterruptedError
		if errors.As(cause, &ie) {
			if other := nd.publish(abortRecord{Node: nd.node, Reason: ie.Error()}); other != nil {
				cause = other
			}
		}
		if cause == nil {
			// Every node finished; a failing node publishes before it
			// counts itself finished, so the record is there if any.
			bg, cancel := context.WithTimeout(context.Background(), storeTimeout)
			if n, err := nd.st.Add(bg, "abort_claim", 0); err == nil && n > 0 {
				if rec, err := nd.readAbort(bg); err == nil && rec.Node != nd.node {
					cause = rec.err()
				}
			}
			cancel()
		}
	}
	wait := storeTimeout
	if nd.node == 0 {
		wait += grace + drainTimeout // others may still be stopping workers
	}
	bg, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	_ = nd.count(bg, "left")
	if nd.node == 0 {
		// Keep the store up until every live node has left.
		for bg.Err() == nil {
			v, err := nd.st.Add(bg, "left", 0)
			if err != nil || v >= int64(nd.n-nd.lostCount()) {
				break
			}
			t := time.NewTimer(20 * time.Millisecond)
			select {
			case <-bg.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	return cause
}

func (nd *nodes) close() {
	nd.stopWatch()
	<-nd.watchDone
	<-nd.beatDone
	nd.st.Close()
	nd.client.Close()
}

// interruptible runs f until it returns, ctx ends, a signal arrives on
// sigs, or an event arrives on events; f's ctx is cancelled in the latter
// cases and f is waited for.
func interruptible(ctx context.Context, sigs <-chan os.Signal, events <-chan nodeEvent, f func(context.Context) error) error {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(fctx) }()
	for {
		select {
		case err := <-done:
			if err != nil && ctx.Err() != nil {
				return &InterruptedError{Err: ctx.Err()}
			}
			return err
		case <-ctx.Done():
			cancel()
			<-done
			return &InterruptedError{Err: ctx.Err()}
		case s, ok := <-sigs:
			if !ok {
				sigs = nil
				continue
			}
			cancel()
			<-done
			return &InterruptedError{Signal: s}
		case ev := <-events:
			cancel()
			<-done
			return ev.err()
		}
	}
}
