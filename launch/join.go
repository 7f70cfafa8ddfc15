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

// joinAttempt is one try of join: ctx is Run's, rctx bounds the
// rendezvous, addr is the store's.
type joinAttempt struct {
	j         *job
	ctx, rctx context.Context
	addr      string
}

// timedOut reports whether err came from the rendezvous timeout rather
// than from Run's context.
func (a *joinAttempt) timedOut(err error) bool {
	return err != nil && a.ctx.Err() == nil && a.rctx.Err() != nil
}

// joinOnce dials the store, settles this node's rank and the attempt's
// nodes, waits for them, and starts the heartbeat.
func (j *job) joinOnce(ctx, rctx context.Context) (*nodes, error) {
	a := &joinAttempt{j: j, ctx: ctx, rctx: rctx, addr: j.storeAddr}
	if j.server != nil {
		a.addr = dialable(j.server.Addr())
	}
	cl, err := a.dial()
	if err != nil {
		return nil, err
	}
	prefix, nnodes, err := a.admit(cl)
	if err != nil {
		cl.Close()
		return nil, err
	}
	c := &j.cfg
	j.nnodes, j.world = nnodes, nnodes*c.NprocPerNode
	nd := newNodes(cl, a.addr, prefix, c.NodeRank, nnodes, c.NprocPerNode, c.MonitorInterval)
	if err := a.rendezvous(nd); err != nil {
		return nil, err
	}
	bctx, bcancel := context.WithCancel(context.Background())
	go nd.heartbeat(bctx)
	stopWatch := nd.stopWatch
	nd.stopWatch = func() { bcancel(); stopWatch() }
	return nd, nil
}

// dial connects to the store, saying now and then that it waits.
func (a *joinAttempt) dial() (*store.Client, error) {
	c := &a.j.cfg
	var cl *store.Client
	err := interruptible(a.rctx, c.Signals, nil, func(ctx context.Context) error {
		stop := notice(ctx, func(waited time.Duration) {
			fmt.Fprintf(c.Stderr, "detcoll launch: node %d: waiting for node 0's store at %s (%v of the %v rendezvous timeout)\n",
				c.NodeRank, a.addr, waited.Round(time.Second), c.RdzvTimeout)
		})
		defer stop()
		var err error
		cl, err = store.Dial(ctx, a.addr, a.j.token)
		return err
	})
	if err == nil {
		return cl, nil
	}
	if cl != nil {
		cl.Close()
	}
	if a.timedOut(err) {
		return nil, &RendezvousTimeoutError{Node: c.NodeRank, Timeout: c.RdzvTimeout, Missing: []int{0},
			NprocPerNode: c.NprocPerNode, Store: a.addr, Reason: "node 0's store never answered"}
	}
	var ie *InterruptedError
	if errors.As(err, &ie) {
		if ie.Err != nil && a.ctx.Err() == nil {
			ie.Err = a.ctx.Err()
		}
		return nil, err
	}
	return nil, fmt.Errorf("launch: node %d: reaching the store at %s: %w", c.NodeRank, a.addr, err)
}

// admit settles the attempt's store prefix and node count, and this
// node's rank when the join order assigns it.
func (a *joinAttempt) admit(cl *store.Client) (prefix string, nnodes int, err error) {
	c := &a.j.cfg
	switch {
	case c.elastic():
		return a.admitElastic(cl)
	case c.NodeRank < 0: // torchrun's c10d without --node-rank: join order
		return a.j.prefix(), c.Nnodes, a.takeNodeRank(cl)
	}
	return a.j.prefix(), c.Nnodes, nil
}

// admitElastic runs an elastic job's admission: node 0 opens it and
// admits the nodes that come; the others take a ticket.
func (a *joinAttempt) admitElastic(cl *store.Client) (string, int, error) {
	j, c := a.j, &a.j.cfg
	prefix := j.prefix()
	nnodes := c.Nnodes
	var inner error // interruptible turns a timeout into an InterruptedError
	err := interruptible(a.rctx, c.Signals, nil, func(ctx context.Context) error {
		if c.NodeRank == 0 {
			// The attempt and the config first, so that a joining
			// node can check them while the admission is open.
			st := store.Prefix(cl, prefix)
			if inner = j.publishConfig(ctx, cl, st); inner == nil {
				nnodes, inner = j.admitNodes(ctx, st, a.addr)
			}
			return inner
		}
		if inner = j.syncAttempt(ctx, cl); inner == nil {
			prefix = j.prefix()
			nnodes, inner = j.takeTicket(ctx, store.Prefix(cl, prefix), a.addr)
		}
		return inner
	})
	if err == nil {
		return prefix, nnodes, nil
	}
	var rt *RendezvousTimeoutError
	if a.timedOut(err) && errors.As(inner, &rt) {
		err = rt
	} else if a.timedOut(err) {
		reason := "node 0 never closed the rendezvous"
		if c.NodeRank == 0 {
			reason = fmt.Sprintf("the last call of %v outlasted it", c.LastCallTimeout)
		}
		err = &RendezvousTimeoutError{Node: c.NodeRank, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: a.addr, Reason: reason}
	}
	return "", 0, err
}

// takeNodeRank assigns this node the next rank in join order.
func (a *joinAttempt) takeNodeRank(cl *store.Client) error {
	c := &a.j.cfg
	prefix := a.j.prefix()
	err := interruptible(a.rctx, c.Signals, nil, func(ctx context.Context) error {
		v, err := store.Prefix(cl, prefix).Add(ctx, "next_node", 1)
		if err == nil && v >= int64(c.Nnodes) {
			err = fmt.Errorf("launch: %w: more nodes joined than Nnodes (--nnodes)=%d", ErrInvalidConfig, c.Nnodes)
		}
		if err == nil {
			c.NodeRank = int(v)
		}
		return err
	})
	if a.timedOut(err) {
		err = &RendezvousTimeoutError{Node: -1, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: a.addr, Reason: "no node rank was assigned"}
	}
	return err
}

// rendezvous waits for every node of nd; on failure it closes nd and, unless
// join will retry, tells the other nodes why.
func (a *joinAttempt) rendezvous(nd *nodes) error {
	j, c := a.j, &a.j.cfg
	err := interruptible(a.rctx, c.Signals, nd.events, func(ctx context.Context) error {
		stopTell := nd.tellWaiting(ctx, c)
		defer stopTell()
		return nd.rendezvous(ctx, j)
	})
	if err == nil {
		return nil
	}
	var ie *InterruptedError
	switch {
	case a.timedOut(err):
		err = nd.timeoutError(c, a.addr)
	case j.attempt > 0 && c.NodeRank != 0 && !errors.Is(err, ErrInvalidConfig) && !errors.As(err, &ie):
		// Probably node 0's previous store closing: join will retry.
		close(nd.beatDone)
		nd.close()
		return err
	}
	if other := nd.publish(abortRecord{Node: c.NodeRank, Reason: err.Error()}); other != nil {
		err = other
	}
	close(nd.beatDone) // never started
	nd.close()
	return err
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
