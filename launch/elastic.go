package launch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/detcoll/detcoll/store"
)

// An elastic job (--nnodes MIN:MAX, Config.MinNodes < Config.Nnodes) meets
// in two steps under the attempt's key prefix. First the admission: every
// node but node 0 takes a ticket, an Add on "next_node"; its ticket is its
// node rank (join order, as torchrun's c10d backend assigns them). Node 0
// watches the counter and closes the admission once MAX nodes have joined,
// or once at least MIN have and LastCallTimeout has passed since the last
// join, by adding closedBias to the same counter and publishing the number
// admitted under "nnodes". Then the admitted nodes run the fixed-size
// rendezvous (nodes.rendezvous) with that number.
//
// Closing with one atomic Add leaves no window between counting the nodes
// and closing: the Add's result counts every ticket taken before it, and
// every ticket taken after it is at least closedBias, so a node knows from
// its own ticket whether it was admitted. A ticket at or above MAX (a node
// beyond MAX, before node 0 saw the counter) is refused too.
const closedBias = 1 << 40

// attemptKey (not under an attempt's prefix) holds the attempt node 0's
// current store serves, for an elastic job's node that arrives during a
// restarted attempt.
const attemptKey = keyPrefix + "attempt"

// failuresKey (beside attemptKey) holds how many failure restarts node 0
// has counted, so that a node that joins a later attempt (a regroup
// admits it) decides the next failure as the others do.
const failuresKey = keyPrefix + "failures"

// prefix is this attempt's key prefix.
func (j *job) prefix() string {
	if j.attempt == 0 {
		return keyPrefix
	}
	return keyPrefix + "attempt" + strconv.Itoa(j.attempt) + "/"
}

// syncAttempt reads which attempt node 0's store serves. A node that is
// behind (it arrives while a restarted attempt runs) takes that attempt
// as its own, so that it meets the others' admission (and joins it, or is
// told it closed) instead of waiting under keys nobody uses. A node that
// is ahead reached node 0's previous store, about to close: join dials
// again.
func (j *job) syncAttempt(ctx context.Context, st store.Store) error {
	b, err := st.Get(ctx, attemptKey)
	if err != nil {
		return err
	}
	cur, err := strconv.Atoi(string(b))
	if err != nil || cur < 0 {
		return fmt.Errorf("launch: node 0's store names attempt %q", b)
	}
	if cur < j.attempt {
		return fmt.Errorf("launch: node 0's store is still attempt %d's, this node is at attempt %d", cur, j.attempt)
	}
	b, err = st.Get(ctx, failuresKey)
	if err != nil {
		return err
	}
	f, err := strconv.Atoi(string(b))
	if err != nil || f < 0 || f > cur {
		return fmt.Errorf("launch: node 0's store names %q failure restarts at attempt %d", b, cur)
	}
	j.attempt, j.failures = cur, f
	return nil
}

// admitPoll is how often node 0 reads the ticket counter while the
// admission is open.
const admitPoll = 20 * time.Millisecond

// admitNodes is node 0's side of the admission on st (the attempt's
// prefix); it returns the number of nodes admitted, node 0 included.
func (j *job) admitNodes(ctx context.Context, st store.Store, addr string) (int, error) {
	c := &j.cfg
	var joined atomic.Int64
	joined.Store(1)
	stop := notice(ctx, func(waited time.Duration) {
		if n := joined.Load(); n < int64(c.MinNodes) {
			fmt.Fprintf(c.Stderr, "detcoll launch: node 0: %d of the at least %d nodes of --nnodes %s joined; waiting (%v of the %v rendezvous timeout)\n",
				n, c.MinNodes, c.nnodesSpec(), waited.Round(time.Second), c.RdzvTimeout)
		}
	})
	defer stop()
	tick := time.NewTicker(admitPoll)
	defer tick.Stop()
	var lastJoin time.Time // once MinNodes joined: when the last call started
	why := ""
	for why == "" {
		v, err := st.Add(ctx, "next_node", 0)
		if err != nil {
			if ctx.Err() != nil {
				return 0, j.admissionTimeout(int(joined.Load()), addr, err)
			}
			return 0, err
		}
		now := time.Now()
		n := int(min(v, int64(c.Nnodes-1))) + 1
		switch {
		case n >= c.Nnodes:
			why = "all of them joined"
		case n >= c.MinNodes && (lastJoin.IsZero() || int64(n) != joined.Load()):
			lastJoin = now // each join starts the last call again, as in torchrun's c10d
		case !lastJoin.IsZero() && now.Sub(lastJoin) >= c.LastCallTimeout:
			why = fmt.Sprintf("the last call of %v ended", c.LastCallTimeout)
		}
		joined.Store(int64(n))
		if why != "" {
			break
		}
		select {
		case <-ctx.Done():
			return 0, j.admissionTimeout(n, addr, ctx.Err())
		case <-tick.C:
		}
	}
	v, err := st.Add(ctx, "next_node", closedBias)
	if err != nil {
		return 0, err
	}
	admitted := int(min(v-closedBias, int64(c.Nnodes-1))) + 1
	if err := st.Set(ctx, "nnodes", []byte(strconv.Itoa(admitted))); err != nil {
		return 0, err
	}
	fmt.Fprintf(c.Stderr, "detcoll launch: node 0: rendezvous closed with %d node%s of --nnodes %s (%s); world size %d\n",
		admitted, plural(admitted), c.nnodesSpec(), why, admitted*c.NprocPerNode)
	return admitted, nil
}

// admissionTimeout is node 0's error when fewer than MinNodes joined
// within the rendezvous timeout (err is the store's error then).
func (j *job) admissionTimeout(joined int, addr string, err error) error {
	c := &j.cfg
	if joined >= c.MinNodes {
		return err // interrupted, not timed out: the caller tells which
	}
	return &RendezvousTimeoutError{Node: 0, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: addr,
		Reason: fmt.Sprintf("only %d of the at least %d nodes of --nnodes %s joined", joined, c.MinNodes, c.nnodesSpec())}
}

// takeTicket is the other nodes' side of the admission: it sets
// c.NodeRank from the ticket and returns the number of nodes admitted, or
// a *RendezvousClosedError if this node came too late.
func (j *job) takeTicket(ctx context.Context, st store.Store, addr string) (int, error) {
	c := &j.cfg
	// Before the ticket, so that a node with another config (another
	// --nnodes, --nproc-per-node, …) fails without being counted.
	if err := j.checkConfig(ctx, st, -1); err != nil {
		return 0, err
	}
	v, err := st.Add(ctx, "next_node", 1)
	if err != nil {
		return 0, err
	}
	if v >= closedBias || v >= int64(c.Nnodes) {
		e := &RendezvousClosedError{RdzvID: c.RdzvID, Store: addr, Nnodes: c.nnodesSpec(), Full: v < closedBias}
		// Node 0 publishes the number right after it closes, at once
		// when the rendezvous is full.
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		if b, err := st.Get(gctx, "nnodes"); err == nil {
			e.Admitted, _ = strconv.Atoi(string(b))
		}
		cancel()
		if e.Admitted >= c.Nnodes {
			e.Full = true
		}
		if e.Full || e.Admitted == 0 {
			return 0, e
		}
		return 0, j.awaitRegroup(ctx, st, addr, e.Admitted)
	}
	c.NodeRank = int(v)
	stop := notice(ctx, func(waited time.Duration) {
		fmt.Fprintf(c.Stderr, "detcoll launch: node %d: joined; waiting for node 0 to close the rendezvous of --nnodes %s (at %d nodes, or %v after the last join once %d have) (%v of the %v rendezvous timeout)\n",
			c.NodeRank, c.nnodesSpec(), c.Nnodes, c.LastCallTimeout, c.MinNodes, waited.Round(time.Second), c.RdzvTimeout)
	})
	defer stop()
	b, err := st.Get(ctx, "nnodes")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n <= c.NodeRank || n > c.Nnodes {
		return 0, fmt.Errorf("launch: node %d: node 0 closed the rendezvous with %q nodes, not in %d…%d", c.NodeRank, b, c.NodeRank+1, c.Nnodes)
	}
	return n, nil
}

// errRegroup tells join that this node waited for a running attempt to
// stop (to admit it, or because it failed): it dials again and joins the
// next attempt's admission.
var errRegroup = errors.New("launch: the running attempt stopped; joining the next one")

// awaitRegroup is a node that came while an elastic attempt runs with
// admitted < MAX nodes: as in torchrun's c10d rendezvous, it is not
// refused but waits. It counts itself under "waiting" (node 0 polls the
// counter and stops the group, see watchWaiting) and waits for the
// attempt's abort record, or for the store to go. Then it takes the next
// attempt as its own, so that it meets node 0's next store. The wait is
// bounded by join's rendezvous timeout: if the job ends instead, the node
// fails as one that comes after the job ended.
func (j *job) awaitRegroup(ctx context.Context, st store.Store, addr string, admitted int) error {
	c := &j.cfg
	if _, err := st.Add(ctx, "waiting", 1); err != nil {
		return err
	}
	fmt.Fprintf(c.Stderr, "detcoll launch: the running attempt of job %q has %d of at most %d nodes (--nnodes %s); this node waits for the group to restart and admit it (rendezvous timeout %v)\n",
		c.RdzvID, admitted, c.Nnodes, c.nnodesSpec(), c.RdzvTimeout)
	err := st.Wait(ctx, "abort")
	if ctx.Err() != nil { // join tells an interruption from the timeout
		return &RendezvousTimeoutError{Node: -1, Timeout: c.RdzvTimeout, NprocPerNode: c.NprocPerNode, Store: addr,
			Reason: fmt.Sprintf("this node waited to join the running group of %d node%s, which did not restart to admit it", admitted, plural(admitted))}
	}
	_ = err // a lost store also ends the attempt: dial the next one
	j.attempt++
	return errRegroup
}

// growPoll is how often node 0 reads the "waiting" counter while an
// elastic attempt runs with fewer than MAX nodes (torchelastic's agent
// checks num_nodes_waiting on each monitor pass, 0.1 s by default; 1 s
// is plenty against a restart that takes longer).
var growPoll = time.Second

// watchWaiting is node 0's: while the attempt runs with fewer than MAX
// nodes it polls "waiting" every growPoll and sends the count once it is
// above zero; nil when there is nothing to watch. It stops with ctx.
func (j *job) watchWaiting(ctx context.Context) <-chan int {
	c := &j.cfg
	if j.nodes == nil || !c.elastic() || c.NodeRank != 0 || j.nnodes >= c.Nnodes {
		return nil
	}
	found := make(chan int, 1)
	go func() {
		t := time.NewTicker(growPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if v, err := j.nodes.st.Add(ctx, "waiting", 0); err == nil && v > 0 {
				found <- int(v)
				return
			}
		}
	}()
	return found
}
