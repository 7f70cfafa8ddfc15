package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/detcoll/detcoll/store"
)

// Keys of the launcher's protocol between nodes, under keyPrefix:
//
//	config        "nnodes=N nproc=P", set by node 0, checked by the others
//	torch_port    the MASTER_PORT node 0 picked for torch
//	node/<r>      counter: node r joined (twice is an error)
//	joined        counter; all_joined is set by the last node to join
//	abort_claim   counter; the node that brings it to 1 writes abort
//	abort         JSON abortRecord: the job's root cause
//	finished      counter of nodes whose workers are done; all_finished
//	left          counter of nodes done with the store; all_left
const keyPrefix = "detcoll/launch/"

// storeTimeout bounds one protocol operation that must not hang a stopping
// launcher (publishing a failure, reading one, leaving).
const storeTimeout = 10 * time.Second

// abortRecord is the root cause of a job, as published by the node that
// found it.
type abortRecord struct {
	Node   int          `json:"node"`
	Reason string       `json:"reason,omitempty"`
	Worker *WorkerError `json:"worker,omitempty"`
}

func (r abortRecord) err() error {
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
	rec  abortRecord
	lost error
}

func (ev nodeEvent) err() error {
	if ev.lost != nil {
		return fmt.Errorf("launch: lost the job's store: %w", ev.lost)
	}
	return ev.rec.err()
}

// nodes is this node's link to the others.
type nodes struct {
	client    *store.Client
	st        store.Store // client under keyPrefix
	node, n   int
	events    chan nodeEvent // at most one, from the watcher
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

func newNodes(cl *store.Client, node, n int) *nodes {
	ctx, cancel := context.WithCancel(context.Background())
	nd := &nodes{client: cl, st: store.Prefix(cl, keyPrefix), node: node, n: n,
		events: make(chan nodeEvent, 1), stopWatch: cancel, watchDone: make(chan struct{})}
	go nd.watch(ctx)
	return nd
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
		nd.events <- nodeEvent{lost: err}
		return
	}
	rec, err := nd.readAbort(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		nd.events <- nodeEvent{lost: err}
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

// rendezvous runs the join protocol and learns j.torchPort.
func (nd *nodes) rendezvous(ctx context.Context, j *job) error {
	c := &j.cfg
	conf := fmt.Sprintf("nnodes=%d nproc=%d", c.Nnodes, c.NprocPerNode)
	if nd.node == 0 {
		if err := nd.st.Set(ctx, "config", []byte(conf)); err != nil {
			return err
		}
		if err := nd.st.Set(ctx, "torch_port", []byte(strconv.Itoa(j.torchPort))); err != nil {
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
		got, err := nd.st.Get(ctx, "config")
		if err != nil {
			return err
		}
		if string(got) != conf {
			return fmt.Errorf("launch: %w: node %d has %s but node 0 has %s", ErrInvalidConfig, nd.node, conf, got)
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
		_ = nd.st.Wait(bg, "all_left")
	}
	return cause
}

func (nd *nodes) close() {
	nd.stopWatch()
	<-nd.watchDone
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

// join connects this node to the job's store and waits for every node.
func (j *job) join(ctx context.Context) (*nodes, error) {
	c := &j.cfg
	addr := j.storeAddr
	if j.server != nil {
		addr = dialable(j.server.Addr())
	}
	var cl *store.Client
	err := interruptible(ctx, c.Signals, nil, func(ctx context.Context) error {
		var err error
		cl, err = store.Dial(ctx, addr, j.token)
		return err
	})
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		var ie *InterruptedError
		if errors.As(err, &ie) {
			return nil, err
		}
		return nil, fmt.Errorf("launch: node %d: reaching the store at %s: %w", c.NodeRank, addr, err)
	}
	nd := newNodes(cl, c.NodeRank, c.Nnodes)
	err = interruptible(ctx, c.Signals, nd.events, func(ctx context.Context) error {
		return nd.rendezvous(ctx, j)
	})
	if err != nil {
		if other := nd.publish(abortRecord{Node: c.NodeRank, Reason: err.Error()}); other != nil {
			err = other
		}
		nd.close()
		return nil, err
	}
	return nd, nil
}

// dialable turns a listening address into one this host can dial.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
