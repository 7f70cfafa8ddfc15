package tcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/detcoll/detcoll/transport"
)

// Rendezvous is the part of a key-value store (such as store.Store) that
// Connect uses: Set publishes this rank's address, Get blocks until a peer's
// address exists or ctx is done.
type Rendezvous interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// EnvHost names the environment variable that supplies Options.Host when it
// is empty.
const EnvHost = "DETCOLL_TCP_HOST"

// EnvChecksum names the environment variable that selects ChecksumAlways
// ("always") when Options.Checksum is ChecksumAuto; "auto" and empty keep
// ChecksumAuto, anything else fails Connect.
const EnvChecksum = "DETCOLL_TCP_CHECKSUM"

// Checksum says which frames carry a CRC-32C of their payload.
type Checksum int

const (
	// ChecksumAuto checksums the payload of every frame except on a
	// loopback connection (both ends' addresses loopback), where the bytes
	// go from one socket buffer to the other without crossing a wire, NIC
	// or cable that could flip a bit; the payload checksum was a sixth of
	// a large loopback transfer's CPU time (docs/benchmarks/tcp-loopback.md).
	// Frame headers are always checksummed.
	ChecksumAuto Checksum = iota
	// ChecksumAlways checksums every payload, loopback too.
	ChecksumAlways
)

func (c Checksum) String() string {
	switch c {
	case ChecksumAuto:
		return "auto"
	case ChecksumAlways:
		return "always"
	}
	return fmt.Sprintf("Checksum(%d)", int(c))
}

// checksumMode resolves o.Checksum with $DETCOLL_TCP_CHECKSUM.
func (o Options) checksumMode() (Checksum, error) {
	switch {
	case o.Checksum == ChecksumAlways:
		return o.Checksum, nil
	case o.Checksum != ChecksumAuto:
		return 0, fmt.Errorf("tcp: invalid Options.Checksum %v", o.Checksum)
	}
	switch v := os.Getenv(EnvChecksum); v {
	case "", "auto":
		return ChecksumAuto, nil
	case "always":
		return ChecksumAlways, nil
	default:
		return 0, fmt.Errorf("tcp: %s=%q: want auto or always", EnvChecksum, v)
	}
}

// loopback reports whether both ends of c are loopback addresses.
func loopback(c *net.TCPConn) bool {
	l, lok := c.LocalAddr().(*net.TCPAddr)
	r, rok := c.RemoteAddr().(*net.TCPAddr)
	return lok && rok && l.IP.IsLoopback() && r.IP.IsLoopback()
}

// inlineAllFor reports whether Exchange moves every message with the peer
// at the other end of c on the calling goroutine: over loopback, when this
// process runs Go code on one P (as the launcher's GOMAXPROCS share does
// where ranks are at least as many as CPUs), so that goroutines could only
// take turns. With more Ps a goroutine per peer and direction can copy on
// several cores at once, which this 2-core machine could not measure, so
// that case keeps the 256 KiB rule. A variable so tests can choose.
var inlineAllFor = func(c *net.TCPConn) bool {
	return loopback(c) && runtime.GOMAXPROCS(0) == 1
}

// DefaultChunkSize is the default Options.ChunkSize.
const DefaultChunkSize = 512 << 10

// DefaultDialTimeout is the default Options.DialTimeout.
const DefaultDialTimeout = 60 * time.Second

// Options tune Connect. The zero value is ready to use.
type Options struct {
	// Host is the IP address or host name to listen on and to advertise to
	// the peers; it must be one they can dial. Empty means $DETCOLL_TCP_HOST,
	// or "127.0.0.1" when that is unset too.
	Host string

	// DialTimeout bounds the whole of Connect (and of Sub): waiting for the
	// peers' addresses, dialing, handshakes, and waiting for the higher ranks
	// to dial in. Zero means DefaultDialTimeout (60s).
	DialTimeout time.Duration

	// ChunkSize is how many payload bytes one checksum covers on the frames
	// this rank sends, rounded down to a power of two in 4 KiB…1 GiB. Zero
	// means DefaultChunkSize (512 KiB); negative means one checksum per
	// frame, which is markedly slower for large messages (see the package
	// doc). Receivers accept any chunk size, so ranks may differ.
	ChunkSize int

	// Token is the job's shared secret (cluster passes the store's token,
	// DETCOLL_TOKEN). When set, every connection is authenticated in both
	// directions by an HMAC-SHA256 challenge/response under it (see the
	// package doc), and a peer that fails is dropped while Connect keeps
	// waiting for the real one. Every rank of a group must use the same
	// token, or none. Empty means no authentication: anyone who can reach
	// the listener and read the store's addresses can join as a missing
	// rank, which is acceptable only among trusted users of one host or
	// network.
	Token string

	// ReadBuffer and WriteBuffer set SO_RCVBUF and SO_SNDBUF on every
	// connection when positive; negative keeps the operating system's
	// default (and, on Linux, its buffer auto-tuning). Zero does that for
	// ReadBuffer. For WriteBuffer zero means $DETCOLL_TCP_SNDBUF (bytes;
	// 0 for the system's default), or else LoopbackWriteBuffer on loopback
	// connections and the system's default on the others.
	ReadBuffer, WriteBuffer int

	// Checksum says whether the frames this rank sends carry a CRC-32C of
	// their payload: ChecksumAuto (the zero value, or $DETCOLL_TCP_CHECKSUM
	// = "always" for ChecksumAlways) leaves it out on loopback connections
	// only. Receivers accept either, so ranks may differ.
	Checksum Checksum

	// Poll is how long a receive that finds its socket empty keeps trying,
	// yielding the CPU between attempts, before it waits in the Go
	// runtime's netpoller (Linux only). Zero means $DETCOLL_TCP_POLL_US
	// (microseconds, 0 for none) or DefaultPoll; negative means never poll.
	Poll time.Duration
}

// EnvWriteBuffer names the environment variable that supplies
// Options.WriteBuffer in bytes when it is zero: a whole number ≥ 0 (0: the
// operating system's default); anything else fails Connect.
const EnvWriteBuffer = "DETCOLL_TCP_SNDBUF"

// LoopbackWriteBuffer is the send buffer (SO_SNDBUF; Linux doubles it) of
// loopback connections unless Options.WriteBuffer or $DETCOLL_TCP_SNDBUF
// say otherwise. Over loopback the sender's write copies into socket
// memory and the receiver's read copies out of it; with the auto-tuned
// buffer (megabytes) a large message is all in the socket before the peer
// reads it, and the reads miss the caches. With this one the bytes in
// flight stay in them: a C loop exchanging 1 MiB each way between two
// processes on this 2-core machine took 185–250 µs against 350–400 with
// the default, and 16 MiB 3.2–4.3 ms against 6.3–7.9 (128 KiB and 384 KiB
// did worse at one size or the other; setting SO_RCVBUF too did worse at
// both). See docs/benchmarks/tcp-loopback.md, "Send buffer and one
// progress loop".
const LoopbackWriteBuffer = 256 << 10

// writeBuffer resolves o.WriteBuffer with $DETCOLL_TCP_SNDBUF: positive to
// set, 0 for the loopback rule, negative for the system's default.
func (o Options) writeBuffer() (int, error) {
	if o.WriteBuffer != 0 {
		return o.WriteBuffer, nil
	}
	v := os.Getenv(EnvWriteBuffer)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("tcp: %s=%q: want a whole number of bytes ≥ 0", EnvWriteBuffer, v)
	}
	if n == 0 {
		return -1, nil
	}
	return int(n), nil
}

// EnvPoll names the environment variable that supplies Options.Poll in
// microseconds when it is zero: a whole number ≥ 0 (0: no polling);
// anything else fails Connect.
const EnvPoll = "DETCOLL_TCP_POLL_US"

// DefaultPoll is the default Options.Poll: on loopback at W = 2 and 4 it
// did better than 20 and 50 µs (docs/benchmarks/tcp-loopback.md), and it is
// the shared-memory transport's yield budget too.
const DefaultPoll = 200 * time.Microsecond

// pollBudget resolves o.Poll with $DETCOLL_TCP_POLL_US; 0 means no polling.
func (o Options) pollBudget() (time.Duration, error) {
	switch {
	case o.Poll > 0:
		return o.Poll, nil
	case o.Poll < 0:
		return 0, nil
	}
	v := os.Getenv(EnvPoll)
	if v == "" {
		return DefaultPoll, nil
	}
	us, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("tcp: %s=%q: want a whole number of microseconds ≥ 0", EnvPoll, v)
	}
	return time.Duration(us) * time.Microsecond, nil
}

func (o Options) withDefaults() (Options, uint8) {
	if o.Host == "" {
		o.Host = os.Getenv(EnvHost)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	var shift uint8
	if o.ChunkSize > 0 {
		shift = uint8(bits.Len(uint(o.ChunkSize)) - 1)
		shift = min(max(shift, minChunkShift), maxChunkShift)
	}
	return o, shift
}

func addrKey(prefix string, rank int) string { return prefix + "/addr/" + strconv.Itoa(rank) }

// Connect joins the group of size ranks whose members all call Connect with
// the same st, prefix and size, and returns rank's end of a fully connected
// mesh: one TCP connection per pair of ranks, dialed by the higher rank.
//
// Each rank with higher ranks to hear from listens on Options.Host and
// publishes its address under prefix+"/addr/<rank>" (the only key it
// writes); the others read those keys and dial. The listener is closed once
// every higher rank has connected. Connect returns when this rank is
// connected to every other, or fails when ctx is done or Options.DialTimeout
// passes first (the error wraps context.Canceled or
// context.DeadlineExceeded and names the missing ranks).
func Connect(ctx context.Context, st Rendezvous, prefix string, rank, size int, opt Options) (*Transport, error) {
	return connect(ctx, st, prefix, rank, size, opt, nil)
}

func connect(ctx context.Context, st Rendezvous, prefix string, rank, size int, opt Options, members []int) (*Transport, error) {
	fail := func(err error) error { return &transport.Error{Op: "connect", Rank: rank, Peer: -1, Err: err} }
	switch {
	case st == nil:
		return nil, fail(errors.New("tcp: nil Rendezvous"))
	case size < 1 || size > math.MaxInt32:
		return nil, fail(fmt.Errorf("tcp: invalid group size %d", size))
	case rank < 0 || rank >= size:
		return nil, fail(fmt.Errorf("tcp: invalid rank %d for a group of %d", rank, size))
	}
	opt, shift := opt.withDefaults()
	sum, err := opt.checksumMode()
	if err != nil {
		return nil, fail(err)
	}
	opt.Checksum = sum
	if opt.Poll, err = opt.pollBudget(); err != nil {
		return nil, fail(err)
	}
	if opt.Poll == 0 {
		opt.Poll = -1 // resolved: a Sub must not read the environment again
	}
	if opt.WriteBuffer, err = opt.writeBuffer(); err != nil {
		return nil, fail(err)
	}
	t := &Transport{
		rank: rank, size: size, prefix: prefix, st: st, opt: opt, shift: shift,
		peers:    make([]*peer, size),
		children: map[*Transport]struct{}{},
		subSeq:   map[uint64]int{},
	}
	t.life, t.kill = context.WithCancel(context.Background())
	if size == 1 {
		return t, nil
	}
	m := &mesher{st: st, prefix: prefix, rank: rank, size: size, group: prefixHash(prefix), members: membersHash(members), opt: opt}
	if opt.Token != "" {
		m.token = []byte(opt.Token)
	}
	conns, err := m.run(ctx)
	if err != nil {
		t.kill()
		return nil, err
	}
	for i, c := range conns {
		if i != rank {
			t.peers[i] = newPeer(i, c, opt.Poll)
			t.peers[i].snd.noCRC = sum == ChecksumAuto && loopback(c)
			t.peers[i].inlineAll = inlineAllFor(c)
		}
	}
	t.progressAll = true
	for i, p := range t.peers {
		if i != rank && (!p.inlineAll || p.rcv.pr == nil) {
			t.progressAll = false
		}
	}
	return t, nil
}

// mesher builds the connections of one rank.
type mesher struct {
	st      Rendezvous
	prefix  string
	rank    int
	size    int
	group   uint64 // prefixHash
	members uint64 // membersHash
	opt     Options
	token   []byte // nil: no authentication

	ln     *net.TCPListener
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	pending  []*net.TCPConn // accepted, handshake not finished, oldest first
	conns    []*net.TCPConn
	reserved []bool // an accepted hello from that rank is being answered
	need     int    // higher ranks not connected yet
	err      error  // first error; it cancels the others
	errPeer  int
	rejected string // the last stray connection turned away, for the error
}

func (m *mesher) setErr(peer int, err error) {
	m.mu.Lock()
	if m.err == nil {
		m.err, m.errPeer = err, peer
	}
	m.mu.Unlock()
	m.cancel(err)
}

// run connects m's rank to every other: it accepts the higher ranks (when
// there are any) and dials the lower ones at once, and fails as a whole when
// either side does or the DialTimeout passes.
func (m *mesher) run(ctx context.Context) ([]*net.TCPConn, error) {
	d := m.opt.DialTimeout
	tctx, tcancel := context.WithTimeoutCause(ctx, d,
		fmt.Errorf("tcp: group not connected within DialTimeout %v: %w", d, context.DeadlineExceeded))
	defer tcancel()
	cctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	m.cancel = cancel
	m.conns = make([]*net.TCPConn, m.size)
	m.reserved = make([]bool, m.size)
	m.need = m.size - 1 - m.rank

	var wg sync.WaitGroup
	if m.need > 0 {
		ln, err := m.listenAndPublish(cctx)
		if ln != nil {
			defer ln.Close()
		}
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.acceptLoop(cctx); err != nil {
				m.setErr(-1, err)
			}
		}()
	}
	for p := 0; p < m.rank; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := m.dial(cctx, p)
			if err != nil {
				m.setErr(p, err)
				return
			}
			m.mu.Lock()
			m.conns[p] = c
			m.mu.Unlock()
		}()
	}
	wg.Wait()
	return m.outcome(cctx)
}

// listenAndPublish opens m's listener (m.ln) and publishes its address for
// the higher ranks. The listener comes back, for the caller to close, even
// when publishing fails.
func (m *mesher) listenAndPublish(ctx context.Context) (*net.TCPListener, error) {
	fail := func(err error) error { return &transport.Error{Op: "connect", Rank: m.rank, Peer: -1, Err: err} }
	ln, addr, err := listen(ctx, m.opt.Host)
	if err != nil {
		return nil, fail(err)
	}
	m.ln = ln
	if err := m.st.Set(ctx, addrKey(m.prefix, m.rank), []byte(addr)); err != nil {
		return ln, fail(fmt.Errorf("tcp: publishing address %s: %w", addr, err))
	}
	return ln, nil
}

// outcome is run's result once the accept and dial sides have stopped: every
// connection, or one error built from what both saw (the first failure, the
// ranks still missing, a stray connection turned away). On error it closes
// the connections made.
func (m *mesher) outcome(ctx context.Context) ([]*net.TCPConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var missing []int
	for p, c := range m.conns {
		if p != m.rank && c == nil {
			missing = append(missing, p)
		}
	}
	err := m.err
	if err == nil && len(missing) > 0 {
		err = context.Cause(ctx)
		if err == nil {
			err = errors.New("tcp: internal error: connect ended with peers missing")
		}
	}
	if err == nil {
		return m.conns, nil
	}
	for _, c := range m.conns {
		if c != nil {
			c.Close()
		}
	}
	if len(missing) > 0 {
		err = fmt.Errorf("%w (no connection to ranks %v)", err, missing)
	}
	if m.rejected != "" {
		err = fmt.Errorf("%w (turned away %s)", err, m.rejected)
	}
	peer := m.errPeer
	if m.err == nil {
		peer = -1
	}
	return nil, &transport.Error{Op: "connect", Rank: m.rank, Peer: peer, Err: err}
}

func listen(ctx context.Context, host string) (*net.TCPListener, string, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, "", fmt.Errorf("tcp: listen on %s: %w", host, err)
	}
	ln := l.(*net.TCPListener)
	a := ln.Addr().(*net.TCPAddr)
	if a.IP.IsUnspecified() {
		ln.Close()
		return nil, "", fmt.Errorf("tcp: host %q is not an address peers can dial; set Options.Host or %s", host, EnvHost)
	}
	return ln, a.String(), nil
}

func (m *mesher) tune(c *net.TCPConn) {
	c.SetNoDelay(true)
	if m.opt.ReadBuffer > 0 {
		c.SetReadBuffer(m.opt.ReadBuffer)
	}
	switch w := m.opt.WriteBuffer; {
	case w > 0:
		c.SetWriteBuffer(w)
	case w == 0 && loopback(c):
		c.SetWriteBuffer(LoopbackWriteBuffer)
	}
}

// dial connects to lower rank p, retrying (with a fresh look at p's address
// each time, which a restarted peer may have replaced) until the handshake
// succeeds or ctx ends. Only rejections that point at a stale address
// (another prefix, another rank) or at a peer that is not this job's
// (authentication) are retried; the others (protocol version, group size,
// member list, duplicate) end it at once.
func (m *mesher) dial(ctx context.Context, p int) (*net.TCPConn, error) {
	var d net.Dialer
	backoff := 5 * time.Millisecond
	var last error
	for {
		addr, err := m.st.Get(ctx, addrKey(m.prefix, p))
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				if last != nil {
					return nil, fmt.Errorf("%w (last attempt: %v)", cause, last)
				}
				return nil, fmt.Errorf("waiting for rank %d's address: %w", p, cause)
			}
			return nil, fmt.Errorf("tcp: reading rank %d's address: %w", p, err)
		}
		nc, err := d.DialContext(ctx, "tcp", string(addr))
		if err == nil {
			c := nc.(*net.TCPConn)
			err = m.clientHandshake(ctx, c, p)
			if err == nil {
				m.tune(c)
				return c, nil
			}
			c.Close()
			var re *rejectedError
			// A token mismatch is retried too: the address may be another
			// job's, and a stray must not end a rank's Connect.
			if errors.As(err, &re) && re.reason != reasonGroup && re.reason != reasonRank && re.reason != reasonAuth {
				return nil, fmt.Errorf("tcp: rank %d at %s: %w", p, addr, err)
			}
		}
		// An attempt cut off by the deadline says less than the one before
		// it (why that one failed): keep the earlier one for the error.
		if last == nil || ctx.Err() == nil {
			last = fmt.Errorf("rank %d at %s: %w", p, addr, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (last attempt: %v)", context.Cause(ctx), last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %v)", context.Cause(ctx), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
