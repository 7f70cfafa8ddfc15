package bench

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// peerError is an I/O error on the connection with peer.
type peerError struct {
	peer int
	err  error
}

// rawPeerError names the peer a step of RawAllToAll failed on, in the
// fields (Rank, Peer, Op) that launch.FailureOf reads, so that a launched
// rank's failure line names it as it names a collective's.
type rawPeerError struct {
	Rank, Peer int
	Op         string
	Err        error
}

func (e *rawPeerError) Error() string {
	return fmt.Sprintf("%s with rank %d: %v", e.Op, e.Peer, e.Err)
}

func (e *rawPeerError) Unwrap() error { return e.Err }

// KV is the part of a rendezvous store RawAllToAll uses (store.Store has it).
type KV interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// RawOptions configure RawAllToAll.
type RawOptions struct {
	// Host is the address to listen on and advertise (default 127.0.0.1).
	Host string
	// OnConnected, when set, is called once every connection is up and
	// before any data moves (fault tests stop a rank here).
	OnConnected func()
}

// RawAllToAll measures plain TCP among the size ranks of a job, the
// ceiling of a collective whose ranks share the hosts and links: every rank
// connects to every other (no framing, no checksums), then all ranks at once
// write bytesPerPeer to every peer and read as much from each. It returns
// the bytes per second this rank received. Every rank must call it with
// the same prefix, size and bytesPerPeer.
//
// It is bounded by ctx in every step (the store, connecting, the transfer):
// when ctx is done the listener and the connections are closed and it
// returns ctx's error wrapped. Peers prove they read this rank's address
// from the store by echoing a random secret published with it, so a stray
// connection cannot take a peer's place.
func RawAllToAll(ctx context.Context, st KV, prefix string, rank, size, bytesPerPeer int, opt RawOptions) (float64, error) {
	if size < 2 || rank < 0 || rank >= size || bytesPerPeer <= 0 {
		return 0, fmt.Errorf("bench: raw all-to-all: rank %d of %d, %d bytes per peer", rank, size, bytesPerPeer)
	}
	host := opt.Host
	if host == "" {
		host = "127.0.0.1"
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("bench: raw all-to-all: %w", err)
	}
	m := &rawMesh{ctx: ctx, st: st, prefix: prefix, rank: rank, size: size, ln: ln, conns: make([]net.Conn, size)}
	// ctx ends every blocking step: Accept, Dial, Read and Write all fail
	// once the listener and the connections are closed.
	stop := context.AfterFunc(ctx, m.closeAll)
	defer func() { stop(); m.closeAll() }()
	if err := m.connect(); err != nil {
		return 0, err
	}
	if opt.OnConnected != nil {
		opt.OnConnected()
	}
	return m.transfer(bytesPerPeer)
}

// rawMesh is one rank's side of RawAllToAll: its listener, its connection
// with every peer, and what it needs to name a failure.
type rawMesh struct {
	ctx        context.Context
	st         KV
	prefix     string
	rank, size int
	ln         net.Listener
	secret     [16]byte

	mu     sync.Mutex
	conns  []net.Conn // by peer; nil for this rank and peers not yet connected
	closed bool
}

// closeAll closes the listener and every connection, and makes keep refuse
// any later one.
func (m *rawMesh) closeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.ln.Close()
	for _, c := range m.conns {
		if c != nil {
			c.Close()
		}
	}
}

// keep records c as the connection with peer p, unless the mesh is closed or
// p already has one.
func (m *rawMesh) keep(p int, c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.conns[p] != nil {
		return false
	}
	m.conns[p] = c
	return true
}

// fail wraps err as the failure of step what, or ctx's error once ctx is done.
func (m *rawMesh) fail(what string, err error) error {
	if cerr := m.ctx.Err(); cerr != nil {
		err = cerr
	}
	return fmt.Errorf("bench: raw all-to-all, rank %d of %d, %s: %w", m.rank, m.size, what, err)
}

// key is the store key of rank r's entry of the given kind.
func (m *rawMesh) key(kind string, r int) string {
	return fmt.Sprintf("%s/raw/%s/%d", m.prefix, kind, r)
}

// connect publishes this rank's address, connects with every peer and waits
// until every rank is connected, so that no one starts the clock early.
// Lower ranks accept, higher ranks dial and send their rank and the
// listener's secret; a hello that does not match is dropped.
func (m *rawMesh) connect() error {
	if _, err := rand.Read(m.secret[:]); err != nil {
		return m.fail("secret", err)
	}
	if err := m.st.Set(m.ctx, m.key("addr", m.rank), append(m.secret[:], m.ln.Addr().String()...)); err != nil {
		return m.fail("publishing the address", err)
	}
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- m.acceptHigher() }()
	for p := 0; p < m.rank; p++ {
		if err := m.dialLower(p); err != nil {
			return err
		}
	}
	if err := <-acceptErr; err != nil {
		return m.fail("accepting the higher ranks", err)
	}
	if err := m.st.Set(m.ctx, m.key("ready", m.rank), []byte{1}); err != nil {
		return m.fail("signalling ready", err)
	}
	for p := 0; p < m.size; p++ {
		if _, err := m.st.Get(m.ctx, m.key("ready", p)); err != nil {
			return m.fail(fmt.Sprintf("waiting for rank %d to connect", p), err)
		}
	}
	return nil
}

// acceptHigher accepts one connection from every higher rank, dropping any
// whose hello does not name a higher rank and carry this rank's secret.
func (m *rawMesh) acceptHigher() error {
	for got := 0; got < m.size-1-m.rank; {
		c, err := m.ln.Accept()
		if err != nil {
			return err
		}
		var hello [4 + 16]byte
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(c, hello[:])
		c.SetReadDeadline(time.Time{})
		p := int(binary.LittleEndian.Uint32(hello[:4]))
		if err != nil || subtle.ConstantTimeCompare(hello[4:], m.secret[:]) != 1 || p <= m.rank || p >= m.size || !m.keep(p, c) {
			c.Close()
			continue
		}
		got++
	}
	return nil
}

// dialLower connects to the lower rank p at the address it published and
// greets it with this rank and p's secret.
func (m *rawMesh) dialLower(p int) error {
	v, err := m.st.Get(m.ctx, m.key("addr", p))
	if err != nil {
		return m.fail(fmt.Sprintf("waiting for rank %d's address", p), err)
	}
	if len(v) <= 16 {
		return m.fail(fmt.Sprintf("rank %d's address", p), errors.New("malformed"))
	}
	var d net.Dialer
	c, err := d.DialContext(m.ctx, "tcp", string(v[16:]))
	if err != nil {
		return m.fail(fmt.Sprintf("connecting to rank %d", p), err)
	}
	if !m.keep(p, c) {
		c.Close()
		return m.fail(fmt.Sprintf("connecting to rank %d", p), errors.New("stopped"))
	}
	var hello [4 + 16]byte
	binary.LittleEndian.PutUint32(hello[:4], uint32(m.rank))
	copy(hello[4:], v[:16])
	if _, err := c.Write(hello[:]); err != nil {
		return m.fail(fmt.Sprintf("greeting rank %d", p), err)
	}
	return nil
}

// rawChunk is the most one Write or Read of the transfer moves.
const rawChunk = 1 << 20

// transfer writes bytesPerPeer to every peer and reads as much from each,
// all at once, and returns the bytes per second received.
func (m *rawMesh) transfer(bytesPerPeer int) (float64, error) {
	src := make([]byte, min(rawChunk, bytesPerPeer))
	var wg sync.WaitGroup
	// pending[p] counts the directions (write to p, read from p) not yet
	// done: on a failure they say which peer this rank was waiting on.
	pending := make([]atomic.Int32, m.size)
	errs := make(chan peerError, 2*m.size)
	start := time.Now()
	for p, c := range m.conns {
		if p == m.rank {
			continue
		}
		wg.Add(2)
		pending[p].Store(2)
		go func(p int, c net.Conn) {
			defer wg.Done()
			if err := rawSend(c, src, bytesPerPeer); err != nil {
				errs <- peerError{p, err}
				return
			}
			pending[p].Add(-1)
		}(p, c)
		go func(p int, c net.Conn) {
			defer wg.Done()
			if err := rawReceive(c, bytesPerPeer); err != nil {
				errs <- peerError{p, err}
				return
			}
			pending[p].Add(-1)
		}(p, c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if pe, ok := <-errs; ok {
		return 0, m.transferFailure(pe, pending)
	}
	return float64((m.size-1)*bytesPerPeer) / elapsed.Seconds(), nil
}

// rawSend writes n bytes to c, src at a time.
func rawSend(c net.Conn, src []byte, n int) error {
	for left := n; left > 0; left -= len(src) {
		if _, err := c.Write(src[:min(len(src), left)]); err != nil {
			return err
		}
	}
	return nil
}

// rawReceive reads n bytes from c; an error after the last byte is no failure.
func rawReceive(c net.Conn, n int) error {
	buf := make([]byte, min(rawChunk, n))
	for left := n; left > 0; {
		k, err := c.Read(buf[:min(len(buf), left)])
		left -= k
		if err != nil && left > 0 {
			return err
		}
	}
	return nil
}

// transferFailure names the peer of the first failure pe. A peer whose
// connection failed on its own is the one; once ctx ended, every connection
// was closed here, and the peer is the lowest this rank still waited on.
func (m *rawMesh) transferFailure(pe peerError, pending []atomic.Int32) error {
	peer := pe.peer
	if m.ctx.Err() != nil {
		for p := range pending {
			if pending[p].Load() > 0 {
				peer = p
				break
			}
		}
	}
	if cerr := m.ctx.Err(); cerr != nil {
		pe.err = cerr
	}
	return fmt.Errorf("bench: raw all-to-all, rank %d of %d: %w", m.rank, m.size, &rawPeerError{Rank: m.rank, Peer: peer, Op: "transfer", Err: pe.err})
}
