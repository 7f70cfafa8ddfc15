package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

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
	err := withConn(ctx, c, func() error { return m.answerHello(c, &from) })
	m.finishAccept(c, from, err)
}

// answerHello runs the acceptor's side of the protocol, in order: read the
// hello, authenticate the dialer when there is a token, then accept (setting
// *from to the rank reserved for c) or reject.
func (m *mesher) answerHello(c *net.TCPConn, from *int) error {
	var hb, cb [helloLen]byte
	h, err := readHello(c, &hb)
	if err != nil {
		return err
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
	reason, err := m.reserve(c, h, from)
	if err != nil {
		return err
	}
	if reason != reasonNone {
		m.reject(c, h, reason, true)
		return errors.New(reasonString(reason))
	}
	encodeHello(&cb, hello{version: protocolVersion, kind: kindAccept, group: m.group,
		members: m.members, from: uint32(m.rank), to: h.from, size: uint32(m.size)})
	_, err = c.Write(cb[:])
	return err
}

// readHello reads a dialer's hello into hb and decodes it. It checks the
// magic first: a stranger that sent a few bytes is dropped without waiting
// for a whole hello.
func readHello(c *net.TCPConn, hb *[helloLen]byte) (hello, error) {
	if _, err := io.ReadFull(c, hb[:len(helloMagic)]); err != nil {
		return hello{}, err
	}
	if string(hb[:len(helloMagic)]) != helloMagic {
		return hello{}, errHelloMagic
	}
	if _, err := io.ReadFull(c, hb[len(helloMagic):]); err != nil {
		return hello{}, err
	}
	h, err := decodeHello(hb[:])
	if err != nil {
		return hello{}, err
	}
	if h.kind != kindHello {
		return hello{}, errHelloKind
	}
	return h, nil
}

// reserve checks an authenticated hello and, when it fits and its rank is
// neither connected nor being answered, reserves that rank for c (*from).
// It returns the reason to reject h, or an error when c was evicted.
func (m *mesher) reserve(c *net.TCPConn, h hello, from *int) (uint8, error) {
	reason := m.check(h)
	if reason != reasonNone {
		return reason, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !m.unpend(c):
		return reasonNone, net.ErrClosed // evicted by a flood meanwhile; the dialer retries
	case m.reserved[h.from] || m.conns[h.from] != nil:
		return reasonDuplicate, nil
	}
	m.reserved[h.from] = true
	*from = int(h.from)
	return reasonNone, nil
}

// finishAccept ends c's handshake: it drops c's reservation of rank from (if
// any) and its pending entry, then closes c on err or registers it as rank
// from's connection, closing the listener once every higher rank is in.
func (m *mesher) finishAccept(c *net.TCPConn, from int, err error) {
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
