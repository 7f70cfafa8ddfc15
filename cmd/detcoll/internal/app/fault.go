package app

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// envFault names the fault-injection variable of the bench fault tests
// (cmd/detcoll's TestBenchFaultMatrix): DETCOLL_TEST_FAULT=PHASE:RANK[:SIGNAL]
// makes rank RANK stop itself (SIGNAL "stop", the default: SIGSTOP, as
// `kill -STOP` would) or kill itself (SIGNAL "kill": SIGKILL, as `kill -9`
// would) at PHASE, one of faultPhases. The other ranks must then fail
// within their bound and the launcher name rank RANK. It is for tests
// only; it does nothing on systems without these signals.
const envFault = "DETCOLL_TEST_FAULT"

// faultPhases are where a fault can be injected, in the order a bench
// rank meets them:
//
//   - rendezvous: on entering the mesh set-up, before joining the store;
//     the peers wait in theirs for this rank's keys (the set-up bound).
//   - connect: once this rank's transport is connected, before its
//     communicator exists; the peers wait in the set-up's first
//     collective (counting nodes, --timeout).
//   - raw: in the raw TCP all-to-all, connected, before data moves.
//   - native: the first run of the native baseline (the CPU ring).
//   - detcoll: in the first collective of the detcoll communicator
//     (bench.Case.RunDeterministic), on its first data message, after the
//     signature exchange: mid-collective.
var faultPhases = []string{"rendezvous", "connect", "raw", "native", "detcoll"}

// fault is where and how a rank fails itself; a fault with no phase is
// none.
type fault struct {
	phase string
	rank  int // the rank that fails
	kill  bool
}

// parseFault reads v. A malformed v is an error on every rank: a fault test
// that injects nothing must not pass.
func parseFault(v string) (fault, error) {
	if v == "" {
		return fault{}, nil
	}
	parts := strings.Split(v, ":")
	bad := func(why string) (fault, error) {
		return fault{}, fmt.Errorf("%s=%q: %s (want PHASE:RANK[:stop|kill], PHASE one of %s)", envFault, v, why, strings.Join(faultPhases, ", "))
	}
	if len(parts) < 2 || len(parts) > 3 {
		return bad("malformed")
	}
	if !slices.Contains(faultPhases, parts[0]) {
		return bad("unknown phase " + parts[0])
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n < 0 {
		return bad("bad rank " + parts[1])
	}
	f := fault{phase: parts[0], rank: n}
	if len(parts) == 3 {
		switch parts[2] {
		case "stop":
		case "kill":
			f.kill = true
		default:
			return bad("unknown signal " + parts[2])
		}
	}
	return f, nil
}

// mine returns the fault if rank is the one that fails, else none.
func (f fault) mine(rank int) fault {
	if f.phase == "" || f.rank != rank {
		return fault{}
	}
	return f
}

// at reports whether the fault is injected at phase.
func (f fault) at(phase string) bool { return f.phase == phase }

// fire stops or kills this process.
func (f fault) fire() {
	if f.kill {
		killSelf()
	} else {
		stopSelf()
	}
}

// faultStartedKey is where a rank of a rendezvous fault test says it runs.
const faultStartedKey = "detcoll/test/fault/started/"

// rendezvousFault runs before the mesh set-up when f is a rendezvous fault
// (for any rank): every rank marks itself started in the launcher's
// store, and the failing rank fires only once every other rank has, so
// that its peers are running (their signal handling in place) and enter
// their set-up when it stops or dies. Without this a kill could reach a
// peer that the launcher then stops before it has started, which dies of
// the SIGTERM silently. It needs a store that a launcher serves.
func rendezvousFault(ctx context.Context, f fault, env launch.Env) error {
	if !f.at("rendezvous") {
		return nil
	}
	if env.StoreAddr == "" || env.ServesStore() {
		return fmt.Errorf("%s: a rendezvous fault needs a launcher's store (detcoll launch)", envFault)
	}
	st, err := store.Dial(ctx, env.StoreAddr, env.Token)
	if err != nil {
		return fmt.Errorf("%s: %w", envFault, err)
	}
	defer st.Close()
	if err := st.Set(ctx, faultStartedKey+strconv.Itoa(env.Rank), nil); err != nil {
		return fmt.Errorf("%s: %w", envFault, err)
	}
	if f.rank != env.Rank {
		return nil
	}
	keys := make([]string, 0, env.WorldSize)
	for r := range env.WorldSize {
		keys = append(keys, faultStartedKey+strconv.Itoa(r))
	}
	if err := st.Wait(ctx, keys...); err != nil {
		return fmt.Errorf("%s: waiting for the peers to start: %w", envFault, err)
	}
	f.fire()
	return nil
}

// faultBackend wraps the backend's cases to inject f in the native or the
// detcoll phase.
type faultBackend struct {
	bench.Backend
	f   fault
	arm *atomic.Bool // set on entering the detcoll phase (faultTransport fires)
}

func (b faultBackend) Prepare(ctx context.Context, spec bench.CaseSpec) (bench.Case, error) {
	c, err := b.Backend.Prepare(ctx, spec)
	if err != nil {
		return c, err
	}
	return &faultCase{Case: c, b: b}, nil
}

var faultOnce sync.Once

type faultCase struct {
	bench.Case
	b faultBackend
}

func (c *faultCase) RunNative(ctx context.Context, iters int) (time.Duration, error) {
	if c.b.f.at("native") {
		faultOnce.Do(c.b.f.fire)
	}
	return c.Case.RunNative(ctx, iters)
}

func (c *faultCase) RunDeterministic(ctx context.Context, alg detcoll.Algorithm, acc detcoll.Accumulate, iters int) (time.Duration, error) {
	if c.b.f.at("detcoll") && c.b.arm != nil {
		c.b.arm.Store(true)
	}
	return c.Case.RunDeterministic(ctx, alg, acc, iters)
}

// faultTransport fires f on the first data message (not the signature
// exchange, phase 1) sent once arm is set: this rank then fails in the
// middle of a collective its peers have entered with it.
type faultTransport struct {
	transport.Transport
	f   fault
	arm *atomic.Bool
}

// phaseSignature is the tag phase of detcoll's signature exchange (comm.go
// keeps it at 1 for the fault tests).
const phaseSignature = 1

func (t *faultTransport) check(tag transport.Tag) {
	if tag.Phase != phaseSignature && t.arm.Load() {
		faultOnce.Do(t.f.fire)
	}
}

func (t *faultTransport) Send(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	t.check(tag)
	return t.Transport.Send(ctx, peer, tag, buf)
}

// Name keeps the wrapped transport's name in the report.
func (t *faultTransport) Name() string {
	if n, ok := t.Transport.(transport.Namer); ok {
		return n.Name()
	}
	return ""
}

// faultExchanger is faultTransport over a transport.Exchanger (tcp), whose
// Exchange the communicator calls instead of Send.
type faultExchanger struct{ *faultTransport }

func (t faultExchanger) Exchange(ctx context.Context, tag transport.Tag, sendBuf, recvBuf func(peer int) ([]byte, bool), report func(error)) {
	t.check(tag)
	t.Transport.(transport.Exchanger).Exchange(ctx, tag, sendBuf, recvBuf, report)
}

// faultSharer is faultTransport over a transport.Sharer (shm), whose window
// the communicator's collectives publish through instead of sending: the
// fault fires as the data block is published.
type faultSharer struct {
	*faultTransport
	sh transport.Sharer
}

func (t faultSharer) WindowBytes() int { return t.sh.WindowBytes() }
func (t faultSharer) Stage(ctx context.Context, n int) ([]byte, error) {
	return t.sh.Stage(ctx, n)
}
func (t faultSharer) Publish(ctx context.Context, tag transport.Tag) ([][]byte, error) {
	t.check(tag)
	return t.sh.Publish(ctx, tag)
}
func (t faultSharer) Release() { t.sh.Release() }

var _ transport.Sharer = faultSharer{}

// faultExposer is faultSharer over a transport.Exposer (shm between
// processes that may read each other), whose large AllGathers expose
// buffers instead of publishing blocks: the fault fires at the exposure.
type faultExposer struct {
	faultSharer
	ex transport.Exposer
}

func (t faultExposer) Expose(ctx context.Context, tag transport.Tag, buf []byte) error {
	t.check(tag)
	return t.ex.Expose(ctx, tag, buf)
}
func (t faultExposer) Exposed(ctx context.Context) ([]int, error) { return t.ex.Exposed(ctx) }
func (t faultExposer) ReadExposed(p, off int, dst []byte) error   { return t.ex.ReadExposed(p, off, dst) }
func (t faultExposer) Unexpose(ctx context.Context) error         { return t.ex.Unexpose(ctx) }

var _ transport.Exposer = faultExposer{}

// wrapFault returns the cluster.Options.WrapTransport for f, nil when f
// needs none: at connect it fires as the transport is handed over, at
// detcoll it wraps the transport to fire once arm is set.
func wrapFault(f fault, arm *atomic.Bool) func(transport.Transport) transport.Transport {
	switch f.phase {
	case "connect":
		return func(t transport.Transport) transport.Transport {
			f.fire()
			return t
		}
	case "detcoll":
		return func(t transport.Transport) transport.Transport {
			ft := &faultTransport{Transport: t, f: f, arm: arm}
			if _, ok := t.(transport.Exchanger); ok {
				return faultExchanger{ft}
			}
			if sh, ok := t.(transport.Sharer); ok {
				if ex, ok := t.(transport.Exposer); ok {
					return faultExposer{faultSharer{ft, sh}, ex}
				}
				return faultSharer{ft, sh}
			}
			return ft
		}
	}
	return nil
}
