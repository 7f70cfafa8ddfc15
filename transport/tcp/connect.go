package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
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
	// connection when positive. Zero keeps the operating system's default
	// (and, on Linux, its buffer auto-tuning), which is usually best.
	ReadBuffer, WriteBuffer int
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
			t.peers[i] = newPeer(i, c)
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

	fail := func(err error) error { return &transport.Error{Op: "connect", Rank: m.rank, Peer: -1, Err: err} }
	var wg sync.WaitGroup
	if m.need > 0 {
		ln, addr, err := listen(cctx, m.opt.Host)
		if err != nil {
			return nil, fail(err)
		}
		m.ln = ln
		defer ln.Close()
		if err := m.st.Set(cctx, addrKey(m.prefix, m.rank), []byte(addr)); err != nil {
			return nil, fail(fmt.Errorf("tcp: publishing address %s: %w", addr, err))
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
		err = context.Cause(cctx)
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
	if m.opt.WriteBuffer > 0 {
		c.SetWriteBuffer(m.opt.WriteBuffer)
	}
}

// Limits on connections still in their handshake: at most
// maxPendingHandshakes at once (a new one closes the oldest), each for at
// most handshakeTimeout. A real rank's handshake takes a few round trips.
const (
	maxPendingHandshakes = 64
	handshakeTimeout     = 10 * time.Second
)

// acceptLoop accepts the higher ranks until all have connected. Each
// connection is handshaken in its own goroutine, so a silent stray cannot
// hold up the others; strays still pending when the loop ends are dropped.
func (m *mesher) acceptLoop(ctx context.Context) error {
	actx, acancel := context.WithCancel(ctx)
	var hs sync.WaitGroup
	defer func() {
		acancel()
		hs.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { m.ln.Close() })
	defer stop()
	for {
		c, err := m.ln.AcceptTCP()
		if err != nil {
			m.mu.Lock()
			done := m.need == 0
			m.mu.Unlock()
			switch {
			case done:
				return nil
			case ctx.Err() != nil:
				return context.Cause(ctx)
			}
			return fmt.Errorf("tcp: accept: %w", err)
		}
		m.mu.Lock()
		m.pending = append(m.pending, c)
		if len(m.pending) > maxPendingHandshakes {
			// Close the oldest: a flood of silent connections must not
			// use up this process's descriptors while the real rank,
			// which answers at once, is still to come.
			m.pending[0].Close()
			m.pending = m.pending[1:]
		}
		m.mu.Unlock()
		hs.Add(1)
		go func() {
			defer hs.Done()
			m.serverHandshake(actx, c)
		}()
	}
}

// withConn runs fn with ctx mapped onto c's deadline. It fails with ctx's
// cause when ctx ends first; on success c has no deadline left.
func withConn(ctx context.Context, c *net.TCPConn, fn func() error) error {
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	err := fn()
	if !stop() {
		// The callback ran (or is running): c may carry a past deadline. The
		// caller closes c on error.
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			err = context.Cause(ctx)
		}
		return err
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && ctxDone(ctx) {
			if cause := context.Cause(ctx); cause != nil {
				return cause
			}
			return context.DeadlineExceeded
		}
		return err
	}
	c.SetDeadline(time.Time{})
	return nil
}

func (m *mesher) check(h hello) uint8 {
	switch {
	case h.version != protocolVersion:
		return reasonVersion
	case h.group != m.group:
		return reasonGroup
	case h.members != m.members:
		return reasonMembers
	case h.size != uint32(m.size):
		return reasonSize
	case h.to != uint32(m.rank) || h.from <= uint32(m.rank) || h.from >= uint32(m.size):
		return reasonRank
	}
	return reasonNone
}

// reject answers h with a reject. authenticated says the dialer proved it
// holds the token (or there is none): only then may a disagreement about the
// group fail this rank's Connect.
func (m *mesher) reject(c *net.TCPConn, h hello, reason uint8, authenticated bool) {
	var b [helloLen]byte
	encodeHello(&b, hello{version: protocolVersion, kind: kindReject, reason: reason, group: m.group,
		members: m.members, from: uint32(m.rank), to: h.from, size: uint32(m.size)})
	c.Write(b[:])
	what := fmt.Sprintf("a connection from %v claiming rank %d: %s", c.RemoteAddr(), h.from, reasonString(reason))
	m.noteStray(what)
	if authenticated && (reason == reasonSize || reason == reasonMembers) {
		// Same key prefix, different idea of the group: a configuration
		// error that waiting cannot cure. Fail the whole Connect now.
		m.setErr(int(h.from), fmt.Errorf("tcp: %s", what))
	}
}

// serverHandshake answers one accepted connection: a valid hello from a
// missing higher rank is accepted and registered; a detcoll hello that does
// not fit is rejected with a reason; anything else, and any connection that
// fails authentication, is dropped unanswered. With a token nothing about
// the hello's content (ranks, size, member list) is acted on before the
// dialer has proved it holds the token, so an impostor cannot take a rank's
// place or abort the group.
func (m *mesher) serverHandshake(ctx context.Context, c *net.TCPConn) {
	var from = -1
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	err := withConn(ctx, c, func() error {
		var hb, cb [helloLen]byte
		// Check the magic first: a stranger that sent a few bytes is
		// dropped without waiting for a whole hello.
		if _, err := io.ReadFull(c, hb[:len(helloMagic)]); err != nil {
			return err
		}
		if string(hb[:len(helloMagic)]) != helloMagic {
			return errHelloMagic
		}
		if _, err := io.ReadFull(c, hb[len(helloMagic):]); err != nil {
			return err
		}
		h, err := decodeHello(hb[:])
		if err != nil {
			return err
		}
		if h.kind != kindHello {
			return errHelloKind
		}
		if h.version != protocolVersion {
			m.reject(c, h, reasonVersion, false)
			return errors.New(reasonString(reasonVersion))
		}
		if (m.token != nil) != (h.flags&flagAuth != 0) {
			// Harmless to answer: it tells a misconfigured rank why, and
			// an impostor nothing it could use.
			m.reject(c, h, reasonAuth, false)
			return errors.New(reasonString(reasonAuth))
		}
		if m.token != nil {
			if err := m.challenge(c, &hb, &cb, h); err != nil {
				m.noteStray(fmt.Sprintf("a connection from %v claiming rank %d: %v", c.RemoteAddr(), h.from, err))
				return err
			}
		}
		// From here on the dialer is authenticated (or nobody is).
		reason := m.check(h)
		if reason == reasonNone {
			m.mu.Lock()
			switch {
			case !m.unpend(c):
				m.mu.Unlock()
				return net.ErrClosed // evicted by a flood meanwhile; the dialer retries
			case m.reserved[h.from] || m.conns[h.from] != nil:
				reason = reasonDuplicate
			default:
				m.reserved[h.from] = true
				from = int(h.from)
			}
			m.mu.Unlock()
		}
		if reason != reasonNone {
			m.reject(c, h, reason, true)
			return errors.New(reasonString(reason))
		}
		encodeHello(&cb, hello{version: protocolVersion, kind: kindAccept, group: m.group,
			members: m.members, from: uint32(m.rank), to: h.from, size: uint32(m.size)})
		_, err = c.Write(cb[:])
		return err
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if from >= 0 {
		m.reserved[from] = false
	}
	m.unpend(c)
	if err != nil {
		c.Close()
		return
	}
	m.tune(c)
	m.conns[from] = c
	m.need--
	if m.need == 0 {
		m.ln.Close() // ends acceptLoop
	}
}

// errAuthFailed is a peer whose MAC did not verify: another token, another
// group, or a replayed or forged handshake.
var errAuthFailed = errors.New("tcp: handshake authentication failed (wrong token, another group, or a replayed handshake)")

// challenge runs the acceptor's half of the authentication: it sends its
// nonce and MAC over the transcript so far (into cb) and verifies the
// dialer's answer.
func (m *mesher) challenge(c *net.TCPConn, hb, cb *[helloLen]byte, h hello) error {
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	ch := hello{version: protocolVersion, kind: kindChallenge, group: m.group, members: m.members,
		from: uint32(m.rank), to: h.from, size: uint32(m.size), flags: flagAuth, nonce: nonce}
	encodeHello(cb, ch) // MAC field zero: it is not covered
	ch.mac = handshakeMAC(m.token, labelAcceptor, m.prefix, hb, cb)
	encodeHello(cb, ch)
	if _, err := c.Write(cb[:]); err != nil {
		return err
	}
	var ab [helloLen]byte
	if _, err := io.ReadFull(c, ab[:]); err != nil {
		return err
	}
	a, err := decodeHello(ab[:])
	if err != nil {
		return err
	}
	if a.kind != kindAuth {
		return errHelloKind
	}
	want := handshakeMAC(m.token, labelDialer, m.prefix, hb, cb)
	if !hmac.Equal(a.mac[:], want[:]) {
		return errAuthFailed
	}
	return nil
}

func (m *mesher) noteStray(what string) {
	m.mu.Lock()
	m.rejected = what
	m.mu.Unlock()
}

// unpend takes c off the pending list (from then on a flood cannot evict
// it) and reports whether it was there. m.mu held.
func (m *mesher) unpend(c *net.TCPConn) bool {
	for i, x := range m.pending {
		if x == c {
			m.pending = append(m.pending[:i], m.pending[i+1:]...)
			return true
		}
	}
	return false
}

// rejectedError is a handshake the acceptor answered with a reject.
type rejectedError struct {
	peer   int
	reason uint8
}

func (e *rejectedError) Error() string {
	return fmt.Sprintf("tcp: rank %d rejected the handshake: %s", e.peer, reasonString(e.reason))
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

func (m *mesher) clientHandshake(ctx context.Context, c *net.TCPConn, p int) error {
	return withConn(ctx, c, func() error {
		var hb, b [helloLen]byte
		h := hello{version: protocolVersion, kind: kindHello, group: m.group,
			members: m.members, from: uint32(m.rank), to: uint32(p), size: uint32(m.size)}
		if m.token != nil {
			nonce, err := newNonce()
			if err != nil {
				return err
			}
			h.flags, h.nonce = flagAuth, nonce
		}
		encodeHello(&hb, h)
		if _, err := c.Write(hb[:]); err != nil {
			return err
		}
		ans, err := m.readAnswer(c, &b)
		if err != nil {
			return err
		}
		if m.token != nil {
			if ans.kind != kindChallenge {
				return fmt.Errorf("tcp: rank %d answered without authenticating (no token there?)", p)
			}
			if ans.from != uint32(p) || ans.to != uint32(m.rank) {
				return fmt.Errorf("tcp: challenge from rank %d to rank %d, want %d to %d", ans.from, ans.to, p, m.rank)
			}
			// Verify the acceptor before proving anything to it.
			var cb [helloLen]byte
			mac := ans.mac
			ans.mac = [sha256.Size]byte{}
			encodeHello(&cb, ans)
			if want := handshakeMAC(m.token, labelAcceptor, m.prefix, &hb, &cb); !hmac.Equal(mac[:], want[:]) {
				return fmt.Errorf("rank %d: %w", p, errAuthFailed)
			}
			a := hello{version: protocolVersion, kind: kindAuth, from: uint32(m.rank), to: uint32(p), size: uint32(m.size),
				mac: handshakeMAC(m.token, labelDialer, m.prefix, &hb, &cb)}
			encodeHello(&b, a)
			if _, err := c.Write(b[:]); err != nil {
				return err
			}
			if ans, err = m.readAnswer(c, &b); err != nil {
				return err
			}
		}
		if ans.kind == kindReject {
			return &rejectedError{peer: p, reason: ans.reason}
		}
		want := hello{version: protocolVersion, kind: kindAccept, group: m.group, members: m.members,
			from: uint32(p), to: uint32(m.rank), size: uint32(m.size)}
		if ans != want {
			return fmt.Errorf("tcp: unexpected handshake answer %+v, want %+v", ans, want)
		}
		return nil
	})
}

// readAnswer reads one handshake message from the acceptor; a reject is
// returned as a message, not an error.
func (m *mesher) readAnswer(c *net.TCPConn, b *[helloLen]byte) (hello, error) {
	if _, err := io.ReadFull(c, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return hello{}, fmt.Errorf("tcp: closed without answering the handshake (not a detcoll listener, or authentication failed?): %w", err)
		}
		return hello{}, err
	}
	h, err := decodeHello(b[:])
	if err != nil {
		return hello{}, fmt.Errorf("tcp: bad handshake answer: %w", err)
	}
	return h, nil
}
