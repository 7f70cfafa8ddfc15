package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/detcoll/detcoll/store"
)

// join connects this node to the job's store and waits for every node, for
// at most RdzvTimeout; then it names the nodes that never came. An elastic
// job first admits its nodes (elastic.go). After a
// restart a node other than 0 may first reach node 0's previous store,
// about to close: losing it then is not an error, it dials again.
func (j *job) join(ctx context.Context) (*nodes, error) {
	c := &j.cfg
	rctx, cancel := context.WithTimeout(ctx, c.RdzvTimeout)
	defer cancel()
	for {
		if c.elastic() && !j.host {
			c.NodeRank = -1 // every attempt admits the nodes anew, in join order
		}
		nd, err := j.joinOnce(ctx, rctx)
		var ie *InterruptedError
		var rt *RendezvousTimeoutError
		var rc *RendezvousClosedError
		if errors.Is(err, errRegroup) && rctx.Err() == nil {
			continue // the attempt this node waited on stopped: join the next
		}
		if err == nil || j.attempt == 0 || c.NodeRank == 0 || errors.Is(err, ErrInvalidConfig) ||
			errors.As(err, &ie) || errors.As(err, &rt) || errors.As(err, &rc) || rctx.Err() != nil {
			return nd, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-rctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (j *job) joinOnce(ctx, rctx context.Context) (*nodes, error) {
	// Long on purpose: one join attempt's steps (dial, node rank, rendezvous, heartbeat) under one cleanup.
	c := &j.cfg
	addr := j.storeAddr
	if j.server != nil {
		addr = dialable(j.server.Addr())
	}
	timedOut := func(err error) bool {
		return err != nil && ctx.Err() == nil && rctx.Err() != nil
	}
	var cl *store.Client
	err := interruptible(rctx, c.Signals, nil, func(ctx context.Context) error {
		stop := notice(ctx, func(waited time.Duration) {
			fmt.Fprintf(c.Stderr, "detcoll launch: node %d: waiting for node 0's store at %s (%v of the %v rendezvous timeout)\n",
				c.NodeRank, addr, waited.Round(time.Second), c.RdzvTimeout)
		})
		defer stop()
		var err error
		cl, err = store.Dial(ctx, addr, j.token)
		return err
	})
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		if timedOut(err) {
			return nil, &RendezvousTimeoutError{Node: c.NodeRank, Timeout: c.RdzvTimeout, Missing: []int{0},
				NprocPerNode: c.NprocPerNode, Store: addr, Reason: "node 0's store never answered"}
		}
		var ie *InterruptedError
		if errors.As(err, &ie) {
			if ie.Err != nil && ctx.Err() == nil {
				ie.Err = ctx.Err()
			}
			return nil, err
		}
		return nil, fmt.Errorf("launch: node %d: reaching the store at %s: %w", c.NodeRank, addr, err)
	}
	prefix := j.prefix()
	nnodes := c.Nnodes
	switch {
	case c.elastic():
		var inner error // interruptible turns a timeout into an InterruptedError
		err := interruptible(rctx, c.Signals, nil, func(ctx context.Context) error {
			if c.NodeRank == 0 {
				// The attempt and the config first, so that a joining
				// node can check them while the admission is open.
				st := store.Prefix(cl, prefix)
				if inner = j.publishConfig(ctx, cl, st); inner == nil {
					nnodes, inner = j.admitNodes(ctx, st, addr)
				}
				return inner
			}
			if inner = j.syncAttempt(ctx, cl); inner == nil {
				prefix = j.prefix()
				nnodes, inner = j.takeTicket(ctx, store.Prefix(cl, prefix), addr)
			}
			return inner
		})
		if err != nil {
			cl.Close()
			var rt *RendezvousTimeoutError
			if timedOut(err) && errors.As(inner, &rt) {
				err = rt
			} else if timedOut(err) {
				reason := "node 0 never closed the rendezvous"
				if c.NodeRank == 0 {
					reason = fmt.Sprintf("the last call of %v outlasted it", c.LastCallTimeout)
				}
				err = &RendezvousTimeoutError{Node: c.NodeRank, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: addr, Reason: reason}
			}
			return nil, err
		}
	case c.NodeRank < 0: // torchrun's c10d without --node-rank: join order
		err := interruptible(rctx, c.Signals, nil, func(ctx context.Context) error {
			v, err := store.Prefix(cl, prefix).Add(ctx, "next_node", 1)
			if err == nil && v >= int64(c.Nnodes) {
				err = fmt.Errorf("launch: %w: more nodes joined than Nnodes (--nnodes)=%d", ErrInvalidConfig, c.Nnodes)
			}
			if err == nil {
				c.NodeRank = int(v)
			}
			return err
		})
		if err != nil {
			cl.Close()
			if timedOut(err) {
				err = &RendezvousTimeoutError{Node: -1, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: addr, Reason: "no node rank was assigned"}
			}
			return nil, err
		}
	}
	j.nnodes, j.world = nnodes, nnodes*c.NprocPerNode
	nd := newNodes(cl, addr, prefix, c.NodeRank, nnodes, c.NprocPerNode, c.MonitorInterval)
	err = interruptible(rctx, c.Signals, nd.events, func(ctx context.Context) error {
		stopTell := nd.tellWaiting(ctx, c)
		defer stopTell()
		return nd.rendezvous(ctx, j)
	})
	if err != nil {
		var ie *InterruptedError
		switch {
		case timedOut(err):
			err = nd.timeoutError(c, addr)
		case j.attempt > 0 && c.NodeRank != 0 && !errors.Is(err, ErrInvalidConfig) && !errors.As(err, &ie):
			// Probably node 0's previous store closing: join will retry.
			close(nd.beatDone)
			nd.close()
			return nil, err
		}
		if other := nd.publish(abortRecord{Node: c.NodeRank, Reason: err.Error()}); other != nil {
			err = other
		}
		close(nd.beatDone) // never started
		nd.close()
		return nil, err
	}
	bctx, bcancel := context.WithCancel(context.Background())
	go nd.heartbeat(bctx)
	stopWatch := nd.stopWatch
	nd.stopWatch = func() { bcancel(); stopWatch() }
	return nd, nil
}

// Waiting for nodes is reported after waitNotice, then every waitRepeat.
var waitNotice, waitRepeat = 5 * time.Second, 30 * time.Second

// notice calls say after waitNotice and then every waitRepeat until ctx
// ends or stop is called, so that a node waiting for others is never
// silent.
func notice(ctx context.Context, say func(waited time.Duration)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		t := time.NewTimer(waitNotice)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			say(time.Since(start))
			t.Reset(waitRepeat)
		}
	}()
	return func() { cancel(); <-done }
}

// tellWaiting prints, while the rendezvous waits, which nodes have not
// joined yet.
func (nd *nodes) tellWaiting(ctx context.Context, c *Config) (stop func()) {
	return notice(ctx, func(waited time.Duration) {
		var missing []string
		for r := range nd.n {
			if v, err := nd.st.Add(ctx, "node/"+strconv.Itoa(r), 0); err == nil && v == 0 {
				missing = append(missing, fmt.Sprintf("node %d (ranks %s)", r, rankRange(r*nd.nproc, nd.nproc)))
			}
		}
		if len(missing) > 0 && ctx.Err() == nil {
			fmt.Fprintf(c.Stderr, "detcoll launch: node %d: waiting for %s to join (%v of the %v rendezvous timeout)\n",
				nd.node, strings.Join(missing, ", "), waited.Round(time.Second), c.RdzvTimeout)
		}
	})
}

// timeoutError names the nodes whose join counter is still zero.
func (nd *nodes) timeoutError(c *Config, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	e := &RendezvousTimeoutError{Node: c.NodeRank, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: addr}
	for r := range nd.n {
		v, err := nd.st.Add(ctx, "node/"+strconv.Itoa(r), 0)
		if err != nil {
			e.Reason = "the store stopped answering: " + err.Error()
			break
		}
		if v == 0 {
			e.Missing = append(e.Missing, r)
		}
	}
	return e
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
