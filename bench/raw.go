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
	// Long on purpose: connect then measure in one sequence that shares the closeAll/keep/fail closures.
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
	var (
		mu     sync.Mutex
		conns  = make([]net.Conn, size)
		closed bool
	)
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		closed = true
		ln.Close()
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	// ctx ends every blocking step: Accept, Dial, Read and Write all fail
	// once the listener and the connections are closed.
	stop := context.AfterFunc(ctx, closeAll)
	defer func() { stop(); closeAll() }()
	keep := func(p int, c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed || conns[p] != nil {
			return false
		}
		conns[p] = c
		return true
	}
	fail := func(what string, err error) (float64, error) {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return 0, fmt.Errorf("bench: raw all-to-all, rank %d of %d, %s: %w", rank, size, what, err)
	}

	var secret [16]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return fail("secret", err)
	}
	key := func(kind string, r int) string { return fmt.Sprintf("%s/raw/%s/%d", prefix, kind, r) }
	if err := st.Set(ctx, key("addr", rank), append(secret[:], ln.Addr().String()...)); err != nil {
		return fail("publishing the address", err)
	}
	// Lower ranks accept, higher ranks dial and send their rank and the
	// listener's secret; a hello that does not match is dropped.
	acceptErr := make(chan error, 1)
	go func() {
		for got := 0; got < size-1-rank; {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			var hello [4 + 16]byte
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadFull(c, hello[:])
			c.SetReadDeadline(time.Time{})
			p := int(binary.LittleEndian.Uint32(hello[:4]))
			if err != nil || subtle.ConstantTimeCompare(hello[4:], secret[:]) != 1 || p <= rank || p >= size || !keep(p, c) {
				c.Close()
				continue
			}
			got++
		}
		acceptErr <- nil
	}()
	for p := 0; p < rank; p++ {
		v, err := st.Get(ctx, key("addr", p))
		if err != nil {
			return fail(fmt.Sprintf("waiting for rank %d's address", p), err)
		}
		if len(v) <= 16 {
			return fail(fmt.Sprintf("rank %d's address", p), errors.New("malformed"))
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", string(v[16:]))
		if err != nil {
			return fail(fmt.Sprintf("connecting to rank %d", p), err)
		}
		if !keep(p, c) {
			c.Close()
			return fail(fmt.Sprintf("connecting to rank %d", p), errors.New("stopped"))
		}
		var hello [4 + 16]byte
		binary.LittleEndian.PutUint32(hello[:4], uint32(rank))
		copy(hello[4:], v[:16])
		if _, err := c.Write(hello[:]); err != nil {
			return fail(fmt.Sprintf("greeting rank %d", p), err)
		}
	}
	if err := <-acceptErr; err != nil {
		return fail("accepting the higher ranks", err)
	}
	// Everyone is connected before anyone starts the clock.
	if err := st.Set(ctx, key("ready", rank), []byte{1}); err != nil {
		return fail("signalling ready", err)
	}
	for p := 0; p < size; p++ {
		if _, err := st.Get(ctx, key("ready", p)); err != nil {
			return fail(fmt.Sprintf("waiting for rank %d to connect", p), err)
		}
	}
	if opt.OnConnected != nil {
		opt.OnConnected()
	}
	const chunk = 1 << 20
	src := make([]byte, min(chunk, bytesPerPeer))
	var wg sync.WaitGroup
	// pending[p] counts the directions (write to p, read from p) not yet
	// done: on a failure they say which peer this rank was waiting on.
	pending := make([]atomic.Int32, size)
	errs := make(chan peerError, 2*size)
	start := time.Now()
	for p, c := range conns {
		if p == rank {
			continue
		}
		wg.Add(2)
		pending[p].Store(2)
		go func(p int, c net.Conn) {
			defer wg.Done()
			for left := bytesPerPeer; left > 0; left -= len(src) {
				if _, err := c.Write(src[:min(len(src), left)]); err != nil {
					errs <- peerError{p, err}
					return
				}
			}
			pending[p].Add(-1)
		}(p, c)
		go func(p int, c net.Conn) {
			defer wg.Done()
			buf := make([]byte, min(chunk, bytesPerPeer))
			for left := bytesPerPeer; left > 0; {
				n, err := c.Read(buf[:min(len(buf), left)])
				left -= n
				if err != nil && left > 0 {
					errs <- peerError{p, err}
					return
				}
			}
			pending[p].Add(-1)
		}(p, c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if pe, ok := <-errs; ok {
		// A peer whose connection failed on its own is the one; once ctx
		// ended, every connection was closed here, and the peer is the
		// lowest this rank still waited on.
		peer := pe.peer
		if ctx.Err() != nil {
			for p := range pending {
				if pending[p].Load() > 0 {
					peer = p
					break
				}
			}
		}
		if cerr := ctx.Err(); cerr != nil {
			pe.err = cerr
		}
		return 0, fmt.Errorf("bench: raw all-to-all, rank %d of %d: %w", rank, size, &rawPeerError{Rank: rank, Peer: peer, Op: "transfer", Err: pe.err})
	}
	return float64((size-1)*bytesPerPeer) / elapsed.Seconds(), nil
}
