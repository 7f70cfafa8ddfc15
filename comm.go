package detcoll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"time"

	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/inproc"
	"github.com/detcoll/detcoll/tree"
)

// Comm is one rank's handle on a group of ranks. See the package doc for the
// contract, thread safety and error behaviour.
type Comm struct {
	t       transport.Transport
	rank    int
	size    int
	id      uint64
	cfg     commConfig
	reducer *reduce.Reducer
	ownRed  bool

	mu       sync.Mutex // one collective at a time
	closed   bool
	poison   error
	ws       []byte
	agr      *agree.Agreement // call numbers and agreed signatures
	splits   uint64
	stats    Stats
	children []*Comm
	deadline sharedDeadline // the context of calls made without one (withTimeout)
	step     stepState      // exchange's reused context and errors (Exchanger transports)
	bufs     stepBuffers    // the bound buffer callbacks of allGatherInto and its kin
	scratch  [][]byte       // reducer inputs of window collectives (inputs)
	dsteps   []tree.Step    // this rank's recursive-doubling schedule (doublingSteps)
	noExpose bool           // every rank's transport said it cannot expose (window.go)
}

// Stats are a communicator's counters, read with (*Comm).Stats.
type Stats struct {
	Collectives        int64 // collectives completed
	SignatureExchanges int64 // signature comparisons that moved messages
	WorkspaceBytes     int   // retained workspace now
	WorkspacePeakBytes int   // largest workspace ever retained
}

type commConfig struct {
	timeout time.Duration
	alg     Algorithm
	acc     Accumulate
	reducer *reduce.Reducer
	// gatherDoublingBytes is the largest AllGather block (bytes per rank)
	// that goes by recursive doubling over messages; the tests lower it.
	gatherDoublingBytes int
	// exposeBytes: AllGather blocks and AllReduce inputs (bytes per rank)
	// of at least this size are copied from the owner's buffer when the
	// transport is a transport.Exposer (window.go).
	exposeBytes int
}

// CommOption configures New and NewInProc.
type CommOption func(*commConfig)

// WithTimeout bounds every collective whose context has no deadline
// (default 5 minutes). A rank that waits longer fails and poisons the Comm.
// A call made with context.Background, context.TODO or nil gets at least d
// and at most 1 % more (its deadline is shared with the calls that start
// within d/100 of it, so that a call costs no timer of its own).
func WithTimeout(d time.Duration) CommOption { return func(c *commConfig) { c.timeout = d } }

// WithDefaultAlgorithm sets the algorithm used when a call does not choose one.
func WithDefaultAlgorithm(a Algorithm) CommOption { return func(c *commConfig) { c.alg = a } }

// WithDefaultAccumulate sets the accumulate mode used when a call does not choose one.
func WithDefaultAccumulate(a Accumulate) CommOption { return func(c *commConfig) { c.acc = a } }

// WithReducer shares a host reducer (and its worker goroutines) between
// communicators; the caller closes it. By default each Comm owns one.
func WithReducer(r *reduce.Reducer) CommOption { return func(c *commConfig) { c.reducer = r } }

// Option adjusts one collective call.
type Option func(*callConfig)

type callConfig struct {
	alg    Algorithm
	acc    Accumulate
	setAlg bool
	setAcc bool
}

// WithAlgorithm forces an algorithm for one call.
func WithAlgorithm(a Algorithm) Option { return func(c *callConfig) { c.alg, c.setAlg = a, true } }

// WithAccumulate sets the fp16/bf16 accumulate mode for one call.
func WithAccumulate(a Accumulate) Option { return func(c *callConfig) { c.acc, c.setAcc = a, true } }

// New returns a communicator over t. It takes ownership of t (Close closes it).
func New(t transport.Transport, opts ...CommOption) (*Comm, error) {
	if t == nil {
		return nil, fmt.Errorf("detcoll: New: %w: nil transport", ErrInvalidArgument)
	}
	c := &Comm{t: t, rank: t.Rank(), size: t.Size(), agr: newAgreement()}
	c.bind()
	c.cfg = commConfig{timeout: 5 * time.Minute, acc: AccumulateNative, gatherDoublingBytes: autoDoublingGatherBytes, exposeBytes: autoExposeBytes}
	for _, o := range opts {
		o(&c.cfg)
	}
	if c.size < 1 || c.rank < 0 || c.rank >= c.size {
		return nil, fmt.Errorf("detcoll: New: %w: rank %d of %d", ErrInvalidArgument, c.rank, c.size)
	}
	if !c.cfg.alg.Valid() || !c.cfg.acc.Valid() || c.cfg.timeout <= 0 {
		return nil, fmt.Errorf("detcoll: New: %w: bad options (algorithm %v, accumulate %v, timeout %v)", ErrInvalidArgument, c.cfg.alg, c.cfg.acc, c.cfg.timeout)
	}
	c.reducer = c.cfg.reducer
	if c.reducer == nil {
		c.reducer = reduce.NewReducer(reducerWorkers(t, c.size))
		c.ownRed = true
	}
	return c, nil
}

// reducerWorkers is how many goroutines this rank's own reducer gets: all
// of GOMAXPROCS, except when every rank of the group shares this host's
// memory (a window: the ranks of one host), where all W ranks reduce at
// the same time and more workers than their share of the CPUs only trade
// hand-offs (W = 2 on 2 cores: each rank reduces alone).
func reducerWorkers(t transport.Transport, w int) int {
	if sh, ok := t.(transport.Sharer); ok && sh.WindowBytes() > 0 && w > 1 {
		return max(1, runtime.GOMAXPROCS(0)/w)
	}
	return 0
}

// NewInProc returns w communicators whose ranks are goroutines of this
// process, rank i at index i. Options apply to every rank; ranks share one
// host reducer unless WithReducer says otherwise.
func NewInProc(w int, opts ...CommOption) ([]*Comm, error) {
	ts, err := inproc.New(w)
	if err != nil {
		return nil, fmt.Errorf("detcoll: NewInProc: %w: %v", ErrInvalidArgument, err)
	}
	out := make([]*Comm, w)
	for i, t := range ts {
		c, err := New(t, opts...)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// Rank is this rank's index in the group.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks W.
func (c *Comm) Size() int { return c.size }

// Transport is the transport this communicator runs over.
func (c *Comm) Transport() transport.Transport { return c.t }

// Stats returns the communicator's counters.
func (c *Comm) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Err returns the error that poisoned the communicator, or nil.
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.poison
}

// ReleaseWorkspace frees the retained workspace (the peak is kept in Stats).
func (c *Comm) ReleaseWorkspace() {
	c.mu.Lock()
	c.ws = nil
	c.stats.WorkspaceBytes = 0
	c.mu.Unlock()
}

// Close releases the transport and the reducer. It is idempotent; pending
// and later collectives fail with ErrClosed. Sub-communicators from Split are
// closed too.
func (c *Comm) Close() error {
	// Close the transport first, without the lock, so a collective blocked in
	// it returns and releases the lock.
	err := c.t.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.deadline.stop()
	c.step.stop()
	for _, ch := range c.children {
		ch.Close()
	}
	if c.ownRed {
		c.reducer.Close()
	}
	return err
}

// workspace returns n bytes of the communicator's lazily grown workspace.
func (c *Comm) workspace(n int) []byte {
	if cap(c.ws) < n {
		c.ws = make([]byte, n)
		c.stats.WorkspaceBytes = n
		c.stats.WorkspacePeakBytes = max(c.stats.WorkspacePeakBytes, n)
	}
	return c.ws[:n]
}

// begin takes the lock and checks the communicator is usable. The caller
// must call c.mu.Unlock.
func (c *Comm) begin(op string) error {
	c.mu.Lock()
	if c.closed {
		return &Error{Op: op, Rank: c.rank, Peer: -1, Err: ErrClosed}
	}
	if c.poison != nil {
		return &Error{Op: op, Rank: c.rank, Peer: -1, Err: fmt.Errorf("%w: %w", ErrPoisoned, c.poison)}
	}
	return nil
}

func (c *Comm) argErr(op string, format string, args ...any) error {
	return &Error{Op: op, Rank: c.rank, Peer: -1, Err: fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))}
}

// fail poisons the communicator, closes its transport so peers fail fast,
// and returns the error to report. Called with c.mu held.
func (c *Comm) fail(op string, err error) error {
	peer := -1
	var te *transport.Error
	var me *agree.MismatchError
	switch {
	case errors.As(err, &te):
		peer = te.Peer
	case errors.As(err, &me) && len(me.Peers) > 0:
		peer = me.Peers[0].Rank // the lowest rank whose proposal differs
	}
	if c.closed {
		err = fmt.Errorf("%w: %w", ErrClosed, err)
	}
	e := &Error{Op: op, Rank: c.rank, Peer: peer, Err: err}
	if c.poison == nil {
		c.poison = e
	}
	if errors.Is(err, ErrMismatch) && !c.closed {
		time.AfterFunc(mismatchGrace, func() { c.t.Close() })
	} else {
		c.t.Close()
	}
	return e
}

// withTimeout applies the default timeout to a context without a deadline.
// The caller holds c.mu.
func (c *Comm) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		// The caller's deadline bounds the call. Nothing a call starts
		// outlives it (exchange and the transports wait for their
		// goroutines and remove their AfterFuncs before returning), so a
		// child context would only cost an allocation and a registration
		// on ctx per call.
		return ctx, func() {}
	}
	if ctx == context.Background() || ctx == context.TODO() {
		return c.deadline.get(c.cfg.timeout), func() {}
	}
	return context.WithTimeout(ctx, c.cfg.timeout)
}

// sharedDeadline is the context of the calls made without a context of
// their own: one timer for all the calls that start within timeout/100 of
// each other, instead of a context.WithTimeout per call: a runtime timer
// and four allocations, on the scale of a 4 KiB collective over shared
// memory (two ranks in one process, W = 2 AllReduce: 554 B and 10
// allocations per operation before, 9 B and 2 after; docs/shm.md, "The
// per-call context"). Every derived context and AfterFunc registered on it
// is removed before its call returns (the transports disarm their
// AfterFuncs), but for exchange's one step context (stepState), which a
// later deadline replaces, so nothing accumulates on it. Its
// deadline is start + timeout + timeout/100, so every call it serves has at
// least the timeout and at most 1 % more. A call that hits it poisons the
// communicator, so no later call meets a context that has expired; a
// context that has ended is replaced anyway.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	start  time.Time
}

func (d *sharedDeadline) get(timeout time.Duration) context.Context {
	now := time.Now()
	slack := timeout / 100
	if d.ctx == nil || now.Sub(d.start) > slack || d.ctx.Err() != nil {
		d.stop()
		total := timeout + slack
		if total < timeout { // a timeout near the largest Duration ("never")
			total = timeout
		}
		d.ctx, d.cancel = context.WithDeadline(context.Background(), now.Add(total))
		d.start = now
	}
	return d.ctx
}

// stop releases the timer.
func (d *sharedDeadline) stop() {
	if d.cancel != nil {
		d.cancel()
		d.ctx, d.cancel = nil, nil
	}
}

// resolve turns the call's options into its algorithm and accumulation.
// reduceScatter says the call is a ReduceScatter, whose Auto is A2ATree
// but for small inputs over messages from W = 4 on (autoReduceScatter):
// its gather form receives every peer's whole input (W times the bytes) in
// as many messages, for the same bits (over TCP at W = 2, 64 KiB per rank:
// 69 µs against 35; docs/architecture.md, "Auto").
func (c *Comm) resolve(opts []Option, reduceScatter bool, bytes, elems int) (Algorithm, Accumulate) {
	cc := callConfig{alg: c.cfg.alg, acc: c.cfg.acc}
	if len(opts) > 0 {
		cc = cc.with(opts)
	}
	if reduceScatter && cc.alg == Auto {
		cc.alg = c.autoReduceScatter(bytes, elems, cc.acc)
	}
	if cc.alg == Auto {
		cc.alg = c.autoAllReduce(bytes, elems, cc.acc)
	}
	// No peer memory here: the IPC algorithms move the same bytes as their
	// transport twins (an unknown value stays, for checkAlgAcc to refuse).
	return cc.alg.Transport(), cc.acc
}

// with applies opts to a copy of cc. It is apart from resolve because
// handing &cc to the options moves cc to the heap: a call without options
// allocates nothing for them.
func (cc callConfig) with(opts []Option) callConfig {
	for _, o := range opts {
		o(&cc)
	}
	return cc
}

// autoAllReduce is Auto's AllReduce algorithm for a call of bytes (elems
// elements) per rank. Over a window the choice is between one publication
// and W-fold arithmetic per rank (gather) and two publications and 1/W of
// it (a2a): it turns on the element count, not the bytes, and on whether
// the host has a CPU for every rank (docs/shm.md, "Choice and workers over
// a window"). Over messages a2a_tree moves the
// same bytes as gather_tree at W = 2 in two steps instead of one, and wins
// only once the halved arithmetic outweighs the second step
// (docs/architecture.md, "Auto").
func (c *Comm) autoAllReduce(bytes, elems int, acc Accumulate) Algorithm {
	if sh, _ := c.window(); sh != nil {
		limit := autoA2AWindowElems
		if c.size >= 4 && hostCPUs() >= c.size {
			limit = autoA2AWindowElemsSpread
		}
		if elems >= limit {
			return A2ATree
		}
		return GatherTree
	}
	if c.size >= autoDoublingMinW && doublingCan(bytes, elems, acc) {
		switch {
		case bytes < autoDoublingARBytes:
			return RecursiveDoubling
		case c.size&(c.size-1) == 0 && bytes < autoHalvingBytes(c.size):
			return HalvingDoubling
		}
	}
	if bytes >= autoA2ABytes && c.size > 2 || bytes >= autoA2ABytesW2 {
		return A2ATree
	}
	return GatherTree
}

// doublingCan reports whether recursive doubling can run a call of bytes
// (elems elements) per rank in accumulate mode acc: not fp16 or bf16 with
// f32 accumulation, whose partials are float32.
func doublingCan(bytes, elems int, acc Accumulate) bool {
	return acc != AccumulateF32 || elems == 0 || bytes != 2*elems
}

// runsAs is the algorithm an AllReduce asked to run alg runs: recursive
// doubling and halving only over messages and with partials in the dtype,
// halving only at W = 2^k; their twins are gather_tree and a2a_tree.
func (c *Comm) runsAs(alg Algorithm, dt DType, acc Accumulate) Algorithm {
	if alg != RecursiveDoubling && alg != HalvingDoubling {
		return alg
	}
	sh, _ := c.window()
	switch {
	case alg == HalvingDoubling && (sh != nil || c.size&(c.size-1) != 0 || acc == AccumulateF32 && dt.Size() == 2):
		return A2ATree
	case alg == RecursiveDoubling && (sh != nil || acc == AccumulateF32 && dt.Size() == 2):
		return GatherTree
	}
	return alg
}

// autoReduceScatter is Auto's ReduceScatter algorithm for an input of bytes
// per rank: a2a_tree, except small inputs over messages from W = 4 on.
// Those go by halving at W = 2^k (up to autoHalvingRSBytes): the same
// ⌈log2 W⌉ messages as recursive doubling, of W/2, W/4, … 1 blocks instead
// of all W, and a quarter to a half of the arithmetic; at other W by
// recursive doubling (up to autoDoublingRSBytes; docs/architecture.md,
// "Auto").
func (c *Comm) autoReduceScatter(bytes, elems int, acc Accumulate) Algorithm {
	if sh, _ := c.window(); sh != nil || c.size < autoDoublingMinW || !doublingCan(bytes, elems, acc) {
		return A2ATree
	}
	switch {
	case c.size&(c.size-1) == 0 && bytes <= autoHalvingRSBytes:
		return HalvingDoubling
	case c.size&(c.size-1) != 0 && bytes <= autoDoublingRSBytes:
		return RecursiveDoubling
	}
	return A2ATree
}

// gatherDoubling reports whether an AllGather of n bytes per rank runs in
// the steps of recursive doubling rather than as one step of W-1 messages.
func (c *Comm) gatherDoubling(n int) bool {
	if sh, _ := c.window(); sh != nil {
		return false
	}
	return c.size >= autoDoublingMinW && n <= c.cfg.gatherDoublingBytes
}

// Tag phases: the step of a collective a message belongs to. With the call
// number and the signature hash (agree.Call) they make the message tag, so a
// rank that is in another step, call or collective than its peer sees
// ErrTagMismatch. New collectives add their own phases (any value not used
// here; phaseSig must stay 1, the fault tests recognise it).
const (
	phaseSig uint32 = iota + 1
	phaseGather
	phaseA2A
	phaseShards
	phaseBcast
	phaseScatter
	phaseBarrier
	phaseSplit
	phaseDoubling
	phaseHalving
	phaseExpose
	phaseExposeShards
)

// tag is the tag of every message of call in the given phase. Every
// collective builds its tags here and only here.
func tag(phase uint32, call agree.Call) transport.Tag {
	return transport.Tag{Phase: phase, Seq: call.Seq, Sig: call.Hash}
}

// exchange runs, concurrently for every peer p, Send(sendBuf(p)) and
// Recv(recvBuf(p)), skipping either when its ok result is false. The first
// error cancels the rest.
func (c *Comm) exchange(ctx context.Context, tg transport.Tag, sendBuf, recvBuf func(p int) ([]byte, bool)) error {
	if c.size == 1 {
		return nil
	}
	if x, ok := c.t.(transport.Exchanger); ok {
		// No goroutine per message (docs/benchmarks/tcp-lean-2026-12-01.md),
		// and no allocation for the step's context and errors.
		ctx, cancel := c.step.context(ctx)
		st := &c.step.errs
		st.first, st.cancel = nil, cancel
		x.Exchange(ctx, tg, sendBuf, recvBuf, c.step.report)
		return st.result()
	}
	return c.exchangeGoroutines(ctx, tg, sendBuf, recvBuf)
}

// exchangeGoroutines is exchange with a goroutine per Send and Recv (apart,
// so that its goroutines' captures do not move exchange's arguments to the
// heap on the Exchanger path).
func (c *Comm) exchangeGoroutines(ctx context.Context, tg transport.Tag, sendBuf, recvBuf func(p int) ([]byte, bool)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &stepErrors{cancel: cancel}
	var wg sync.WaitGroup
	for p := 0; p < c.size; p++ {
		if p == c.rank {
			continue
		}
		if b, ok := sendBuf(p); ok {
			wg.Add(1)
			go func(p int, b []byte) {
				defer wg.Done()
				if err := c.t.Send(ctx, p, tg, b); err != nil {
					st.report(err)
				}
			}(p, b)
		}
		if b, ok := recvBuf(p); ok {
			wg.Add(1)
			go func(p int, b []byte) {
				defer wg.Done()
				if err := c.t.Recv(ctx, p, tg, b); err != nil {
					st.report(err)
				}
			}(p, b)
		}
	}
	wg.Wait()
	return st.result()
}

// bind makes the method values that the steps hand to the transport, once
// per communicator (New, Split).
func (c *Comm) bind() {
	c.step.report = c.step.errs.report
	c.bufs.sendFn, c.bufs.recvFn = c.bufs.sendBuf, c.bufs.recvBuf
}

// stepState is what exchange reuses from step to step over an Exchanger
// (the communicator's lock serialises the steps): the step's cancellable
// context, derived once per parent context instead of once per step (two
// allocations and a registration on the parent, about 0.6 µs of a 13 µs
// 4 KiB AllGather over TCP; docs/benchmarks/tcp-loopback.md, "No context
// work per message"), and its error collector. The context stays a child of
// the last call's context until it is cancelled (an error, which poisons
// the communicator), a call brings another context, or Close; one child
// per communicator, so nothing accumulates on the parent.
type stepState struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	errs   stepErrors
	report func(error) // errs.report, bound once
}

func (s *stepState) context(parent context.Context) (context.Context, context.CancelFunc) {
	if s.ctx == nil || s.parent != parent || s.ctx.Err() != nil {
		s.stop()
		s.ctx, s.cancel = context.WithCancel(parent)
		s.parent = parent
	}
	return s.ctx, s.cancel
}

// stop releases the context (Close).
func (s *stepState) stop() {
	if s.cancel != nil {
		s.cancel()
		s.parent, s.ctx, s.cancel = nil, nil, nil
	}
}

// stepErrors keeps the error an exchange step returns: the first one, or a
// tag mismatch over anything else.
type stepErrors struct {
	mu     sync.Mutex
	first  error
	cancel context.CancelFunc
}

func (st *stepErrors) report(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	// A tag mismatch says what went wrong; the errors it causes on the
	// other pairs (cancelled, peer closed) do not.
	mism := errors.Is(err, transport.ErrTagMismatch)
	if st.first == nil || (mism && !errors.Is(st.first, transport.ErrTagMismatch)) {
		st.first = err
	}
	if mism {
		// Let the other pairs finish for a moment, so the peers read
		// this rank's messages and see the mismatch themselves.
		time.AfterFunc(mismatchGrace, st.cancel)
		return
	}
	st.cancel()
}

func (st *stepErrors) result() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.first
}

// allGatherBlocks sends mine to every peer and receives peer p's block into
// blocks[p]. blocks[c.rank] is not touched.
func (c *Comm) allGatherBlocks(ctx context.Context, tg transport.Tag, mine []byte, blocks func(p int) []byte) error {
	return c.exchange(ctx, tg,
		func(int) ([]byte, bool) { return mine, true },
		func(p int) ([]byte, bool) { return blocks(p), true })
}

// allGatherInto is allGatherBlocks where peer p's block is all[p*n,
// (p+1)*n), allGatherList where it is blocks[p], and scatterList sends
// send[p*n, (p+1)*n) to every peer p and receives peer p's block into
// blocks[p] (a one-lane a2a step). Their buffer callbacks are the
// communicator's, bound once (stepBuffers), so these steps allocate nothing
// for them: closures handed to the transport escape through its interface,
// and a 4 KiB collective over TCP made one to three per step.
func (c *Comm) allGatherInto(ctx context.Context, tg transport.Tag, mine, all []byte, n int) error {
	b := &c.bufs
	b.mine, b.all, b.n = mine, all, n
	return b.run(ctx, c, tg)
}

func (c *Comm) allGatherList(ctx context.Context, tg transport.Tag, mine []byte, blocks [][]byte) error {
	b := &c.bufs
	b.mine, b.list = mine, blocks
	return b.run(ctx, c, tg)
}

func (c *Comm) scatterList(ctx context.Context, tg transport.Tag, send []byte, n int, blocks [][]byte) error {
	b := &c.bufs
	b.send, b.sn, b.list = send, n, blocks
	return b.run(ctx, c, tg)
}

// stepBuffers holds a step's buffers for its bound callbacks (the
// communicator's lock serialises the steps): this rank sends mine to every
// peer, or send[p*sn, (p+1)*sn) to peer p when send is set; it receives
// peer p's block into list[p] when list is set, else into all[p*n,
// (p+1)*n).
type stepBuffers struct {
	mine, send, all []byte
	sn, n           int
	list            [][]byte
	sendFn, recvFn  func(p int) ([]byte, bool) // sendBuf and recvBuf, bound once
}

func (b *stepBuffers) run(ctx context.Context, c *Comm, tg transport.Tag) error {
	err := c.exchange(ctx, tg, b.sendFn, b.recvFn)
	*b = stepBuffers{sendFn: b.sendFn, recvFn: b.recvFn} // keep none of the caller's buffers
	return err
}

func (b *stepBuffers) sendBuf(p int) ([]byte, bool) {
	if b.send != nil {
		return b.send[p*b.sn : (p+1)*b.sn], true
	}
	return b.mine, true
}

func (b *stepBuffers) recvBuf(p int) ([]byte, bool) {
	if b.list != nil {
		return b.list[p], true
	}
	return b.all[p*b.n : (p+1)*b.n], true
}

// signature identifies a collective call for cross-rank validation.
type signature struct {
	op       uint8
	dt       uint8
	acc      uint8
	alg      uint8
	root     int32
	lanes    uint32
	count    uint64 // elements (per rank input for AllReduce/AllGather, output for ReduceScatter)
	laneHash uint64 // hash of every lane's count, for the Many variants
}

// maxCachedSignatures bounds the agreed-signature cache (workloads with
// ever-changing sizes would otherwise grow it without limit).
const maxCachedSignatures = agree.DefaultMaxAgreed

func newAgreement() *agree.Agreement {
	return agree.New(agree.Config{
		Describe:  func(r agree.Record) string { return decodeSig(r[:]).String() },
		MaxAgreed: maxCachedSignatures,
	})
}

// encode writes s into the first 28 bytes of a signature record.
func (s signature) encode(b []byte) {
	b[0], b[1], b[2], b[3] = s.op, s.dt, s.acc, s.alg
	binary.LittleEndian.PutUint32(b[4:], uint32(s.root))
	binary.LittleEndian.PutUint32(b[8:], s.lanes)
	binary.LittleEndian.PutUint64(b[12:], s.count)
	binary.LittleEndian.PutUint64(b[20:], s.laneHash)
}

func decodeSig(b []byte) signature {
	return signature{op: b[0], dt: b[1], acc: b[2], alg: b[3],
		root:  int32(binary.LittleEndian.Uint32(b[4:])),
		lanes: binary.LittleEndian.Uint32(b[8:]), count: binary.LittleEndian.Uint64(b[12:]),
		laneHash: binary.LittleEndian.Uint64(b[20:])}
}

var opNames = []string{"?", "AllReduce", "AllGather", "ReduceScatter", "AllGatherMany", "ReduceScatterMany", "Broadcast", "Scatter", "Barrier", "Split"}

const (
	opAllReduce uint8 = iota + 1
	opAllGather
	opReduceScatter
	opAllGatherMany
	opReduceScatterMany
	opBroadcast
	opScatter
	opBarrier
	opSplit
)

func (s signature) String() string {
	name := "?"
	if int(s.op) < len(opNames) {
		name = opNames[s.op]
	}
	if s.op == opBarrier || s.op == opSplit {
		return name + "()"
	}
	str := fmt.Sprintf("%s(count=%d", name, s.count)
	if s.dt != 0 {
		str += fmt.Sprintf(", dtype=%v", DType(s.dt))
	}
	switch s.op {
	case opAllReduce, opReduceScatter, opReduceScatterMany:
		str += fmt.Sprintf(", accumulate=%v, algorithm=%v", Accumulate(s.acc), Algorithm(s.alg))
	}
	if s.op == opAllGatherMany || s.op == opReduceScatterMany {
		str += fmt.Sprintf(", lanes=%d, lane-sizes-hash=%#x", s.lanes, s.laneHash)
	}
	if s.op == opBroadcast || s.op == opScatter {
		str += fmt.Sprintf(", root=%d", s.root)
	}
	return str + ")"
}

func laneHash(counts []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, n := range counts {
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	return h.Sum64()
}

// agreeOn numbers this call and, the first time this Comm sees rec,
// compares it across ranks (one proposal from every rank, tagged with the
// call number). It returns the call's identity, which every message of the
// call carries in its tag.
func (c *Comm) agreeOn(ctx context.Context, rec *agree.Record) (agree.Call, error) {
	call, need := c.agr.Begin(rec)
	if !need {
		return call, nil
	}
	if c.size > 1 {
		c.stats.SignatureExchanges++
	}
	return call, c.agr.Compare(c.rank, c.size, call, rec, func(mine, all []byte) error {
		return c.allGatherInto(ctx, transport.Tag{Phase: phaseSig, Seq: call.Seq}, mine, all, agree.ProposalSize)
	})
}

// mismatch turns a tag mismatch into an ErrMismatch that names this rank's
// call and, as far as the peer's tag tells, the peer's: its call number and
// either a new collective it is comparing or one both have agreed on before
// (found by its full signature hash in this rank's cache).
func (c *Comm) mismatch(err error, call agree.Call, rec *agree.Record) error {
	var te *transport.TagError
	if !errors.As(err, &te) {
		return err
	}
	peer, peerTag, via := offender(err, te)
	if via >= 0 && (peerTag.Sig == 0 || peerTag.Seq == call.Seq && peerTag.Sig == call.Hash) {
		// A relay whose call is this rank's own blames the rank that
		// relayed it; one without a call names the rank it blames.
		desc := fmt.Sprintf("a collective other than this rank's (relayed by rank %d)", via)
		if peerTag.Sig != 0 {
			peer = via
			desc = "a collective other than this rank's (it relayed this rank's call as the one that differs)"
		}
		pc := agree.PeerCall{Rank: peer, Desc: desc}
		return c.agr.TagMismatch(c.rank, call, rec, pc, err)
	}
	pc := c.agr.Peer(peer, agree.Call{Seq: peerTag.Seq, Hash: peerTag.Sig}, peerTag.Phase == phaseSig)
	return c.agr.TagMismatch(c.rank, call, rec, pc, err)
}

// offender is the rank whose call differs, and the tag of its message, as
// a tag mismatch tells: the peer whose message carried te.Got (the receiver's
// view) or, when our send failed, the peer that wanted te.Want; a relayed
// tag (relayTag) names the rank it came from, and via is the rank that
// relayed it (-1 when not relayed).
func offender(err error, te *transport.TagError) (peer int, tg transport.Tag, via int) {
	peer, via = -1, -1
	peerTag := te.Got
	var tr *transport.Error
	if errors.As(err, &tr) {
		peer = tr.Peer
		if tr.Op == "send" {
			peerTag = te.Want // the peer received our message and wanted Want
		}
	}
	if peerTag.Phase&phaseRelayBit != 0 {
		via = peer
		peer = int(peerTag.Phase >> 8 & (1<<23 - 1))
		peerTag.Phase &= 0xff
	}
	return peer, peerTag, via
}

// Relayed mismatches. In the level-by-level algorithms (recursive doubling,
// halving) a rank hears from only one peer per level, so a rank whose call
// differs is seen by its own partners only. A rank that sees a mismatch
// sends every later partner an empty message whose tag is the differing
// rank's, with phaseRelayBit and that rank in the phase; the partner's
// receive fails on the tag as if it had heard from that rank itself, and
// relays it on. So every rank's call fails with ErrMismatch naming the rank
// that differs (docs/reliability.md, "Mismatched collectives").
const phaseRelayBit = 1 << 31

// relayTag is the tag that relays the mismatch err tells of, seen in call.
// A relayed call that is this rank's own means the relaying rank differs,
// whose call is not known here: that relay names it and carries no call
// (Sig 0).
func relayTag(err error, call agree.Call) (transport.Tag, bool) {
	var te *transport.TagError
	if !errors.As(err, &te) {
		return transport.Tag{}, false
	}
	peer, tg, via := offender(err, te)
	if via >= 0 && tg.Sig != 0 && tg.Seq == call.Seq && tg.Sig == call.Hash {
		peer, tg.Sig = via, 0
	}
	if peer < 0 || peer >= 1<<23 || tg.Phase > 0xff {
		return transport.Tag{}, false
	}
	tg.Phase |= phaseRelayBit | uint32(peer)<<8
	return tg, true
}

// relayMismatch sends the relay of err's mismatch to every rank in to, each
// bounded by mismatchGrace; it does nothing for other errors.
func (c *Comm) relayMismatch(ctx context.Context, err error, call agree.Call, to []int) {
	tg, ok := relayTag(err, call)
	if !ok || len(to) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, mismatchGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range to {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.t.Send(ctx, p, tg, nil) // best effort: the call has failed already
		}()
	}
	wg.Wait()
}

// mismatchGrace is how long a rank that found a mismatch keeps its other
// transfers and then its transport open, so that its peers read the
// offending message themselves and report the mismatch too, rather than
// only a closed connection. An exchange returns as soon as all its
// transfers end, which in an all-to-all pattern is at once (every peer
// reads this rank's message and fails), so the grace only bounds the wait
// for a straggler or for a peer that never reads from this rank (rooted
// calls). 250 ms was too short for a straggler on a loaded 2-core machine
// under -race (a W = 4 inproc peer saw only a closed connection).
const mismatchGrace = time.Second

// run is the frame of every collective that every rank of the group calls:
// lock, state checks, argument checks (check, which must not move data),
// agreement (call number, signature comparison on first sight), the data
// phase, and poisoning on failure.
//
// A new collective calls
//
//	c.run(ctx, op, func() (signature, error) { …checks…; return signature{op: opX, …}, nil },
//		func(ctx context.Context, call agree.Call) error {
//			return c.exchange(ctx, tag(phaseX, call), …) // or allGatherBlocks, forPeers
//		})
//
// and builds every message tag with tag(phase, call). An error from check
// leaves the call number alone and the Comm usable; from there on every
// error poisons. Point-to-point operations, which not every rank calls,
// must not use run (they would put the ranks' call numbers out of step).
func (c *Comm) run(ctx context.Context, op string, check func() (signature, error), body func(ctx context.Context, call agree.Call) error) error {
	if err := c.begin(op); err != nil {
		c.mu.Unlock()
		return err
	}
	defer c.mu.Unlock()
	s, err := check()
	if err != nil {
		return err
	}
	if ctx != nil && ctx.Err() != nil {
		return &Error{Op: op, Rank: c.rank, Peer: -1, Err: ctx.Err()}
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var rec agree.Record
	s.encode(rec[:])
	call, err := c.agreeOn(ctx, &rec)
	if err == nil {
		err = body(ctx, call)
	}
	if err != nil {
		if errors.Is(err, transport.ErrTagMismatch) {
			err = c.mismatch(err, call, &rec)
		}
		return c.fail(op, err)
	}
	c.stats.Collectives++
	return nil
}
