package store

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// maxParkedPerConn bounds the Get/Wait requests one connection may have
// blocked at once; beyond it the server answers "limit" and the Client
// retries (see ServerOptions.MaxParked).
const maxParkedPerConn = 1024

// Defaults of ServerOptions; see there.
const (
	DefaultAuthTimeout     = 10 * time.Second
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultMaxConns        = 1024
	DefaultMaxPendingConns = 64
	DefaultMaxParked       = 4096
	DefaultMaxParkedBytes  = 16 << 20
	DefaultMaxBytes        = 1 << 30
)

// ServerOptions configure a Server. Zero fields take the defaults above; a
// negative value switches that cap or timeout off (for tests and
// measurements; a server reachable by others should keep them all).
type ServerOptions struct {
	// Token, when non-empty (at most MaxKeyLen bytes), must be presented by
	// every client before any request; empty serves any client.
	Token string

	// AuthTimeout bounds how long a connection may take to send its hello
	// (and, with a token, to prove it); then it is closed. Default 10s.
	AuthTimeout time.Duration

	// IdleTimeout closes an authenticated connection that sends nothing for
	// this long. The server announces it in the welcome and Clients send a
	// keepalive at a third of it, so only clients that went away (or never
	// were detcoll clients) are cut. Default 5m.
	IdleTimeout time.Duration

	// MaxConns caps the authenticated connections. The one beyond is told
	// so (Dial fails with ErrLimit naming the cap) and closed. Default 1024.
	MaxConns int

	// MaxPendingConns caps the connections that have not finished their
	// hello. When a new one would exceed it the oldest pending connection
	// is closed, so a flood of silent connections cannot keep out a client
	// that sends its hello at once. Default 64.
	MaxPendingConns int

	// MaxParked caps the Get and Wait requests blocked in the server across
	// all connections (each costs a goroutine, about 6 KiB), and
	// MaxParkedBytes the bytes of their keys; a connection may have at most
	// 1024 of them. A Get/Wait over a cap whose keys do not exist yet is
	// answered "limit" and the Client retries it (backing off up to 0.5s)
	// until its ctx ends, so callers see only a slower wake-up. Get/Wait on
	// keys that exist are answered at once, whatever the caps. Defaults
	// 4096 and 16 MiB.
	MaxParked      int
	MaxParkedBytes int

	// MaxBytes caps the bytes of keys and values stored; a Set, Add or
	// CompareSet that would exceed it fails with ErrLimit. Default 1 GiB.
	MaxBytes int64
}

func (o ServerOptions) withDefaults() ServerOptions {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.AuthTimeout, DefaultAuthTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	defInt(&o.MaxConns, DefaultMaxConns)
	defInt(&o.MaxPendingConns, DefaultMaxPendingConns)
	defInt(&o.MaxParked, DefaultMaxParked)
	defInt(&o.MaxParkedBytes, DefaultMaxParkedBytes)
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return o
}

// Server serves a Memory store over TCP. Create it with Listen or Serve.
type Server struct {
	ln    net.Listener
	opt   ServerOptions
	token []byte // nil: no authentication
	mem   *Memory
	done  chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]struct{}
	pending []net.Conn // not yet past the hello, oldest first
	authed  int        // connections past the hello
	wg      sync.WaitGroup

	pmu         sync.Mutex
	parked      int // Get/Wait blocked, all connections
	parkedBytes int // bytes of their keys
}

// Listen starts a server on addr ("host:port"; port 0 picks a free port; ""
// means "127.0.0.1:0") with the default ServerOptions and token. An empty
// host means 127.0.0.1, not every interface: a store that must be reachable
// from other hosts has to name its interface (e.g. "0.0.0.0:29500").
// A non-empty token (at most MaxKeyLen bytes) must be presented by every
// client before any request; with an empty token any client is served.
func Listen(addr, token string) (*Server, error) {
	return ListenOptions(addr, ServerOptions{Token: token})
}

// ListenOptions is Listen with options.
func ListenOptions(addr string, opt ServerOptions) (*Server, error) {
	if len(opt.Token) > MaxKeyLen {
		return nil, &OpError{Op: "listen", Key: addr, Err: fmt.Errorf("%w: token of %d bytes exceeds %d", ErrProtocol, len(opt.Token), MaxKeyLen)}
	}
	host, port := "", "0"
	if addr != "" {
		var err error
		if host, port, err = net.SplitHostPort(addr); err != nil {
			return nil, &OpError{Op: "listen", Key: addr, Err: err}
		}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, &OpError{Op: "listen", Key: addr, Err: err}
	}
	return ServeOptions(ln, opt), nil
}

// Serve serves on ln, which the Server owns from now on (Close closes it),
// with the default ServerOptions. token is as for Listen; a token over
// MaxKeyLen bytes admits no client.
func Serve(ln net.Listener, token string) *Server {
	return ServeOptions(ln, ServerOptions{Token: token})
}

// ServeOptions is Serve with options.
func ServeOptions(ln net.Listener, opt ServerOptions) *Server {
	opt = opt.withDefaults()
	s := &Server{ln: ln, opt: opt, mem: NewMemory(), done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	if opt.Token != "" {
		s.token = []byte(opt.Token)
	}
	if opt.MaxBytes > 0 {
		s.mem.limit = opt.MaxBytes
	}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr returns the address the server listens on, as host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every client connection, fails blocked
// requests, and returns once every goroutine of the server has exited. It is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.mem.Close()
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return // listener closed under us
			}
			// Most likely out of file descriptors: back off as net/http does
			// rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
			case <-s.done:
				return
			}
			continue
		}
		delay = 0
		// Register under mu so that Close either sees the conn or we see
		// closed; wg.Add happens before Close's wg.Wait either way.
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[nc] = struct{}{}
		s.pending = append(s.pending, nc)
		if max := s.opt.MaxPendingConns; max > 0 && len(s.pending) > max {
			// Evict the oldest: it had the longest time to say hello.
			old := s.pending[0]
			s.pending = s.pending[1:]
			old.Close()
		}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(nc)
	}
}

// conn is the server side of one client connection.
type conn struct {
	nc  net.Conn
	wmu sync.Mutex // one frame at a time

	mu     sync.Mutex
	parked map[uint64]context.CancelFunc // blocked get/wait by request id
}

func (c *conn) write(frame []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.nc.Write(frame); err != nil {
		c.nc.Close() // the reader then fails and tears the connection down
	}
}

func (c *conn) reply(id uint64, payload []byte, err error) {
	b := make([]byte, 4, 4+8+1+len(payload))
	if err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			err = oe.Err // the client adds op and key itself
		}
		text := err.Error()
		b = appendResponse(b, id, statusOf(err), []byte(text[:min(len(text), maxErrorText)]))
	} else {
		b = appendResponse(b, id, statusOK, payload)
	}
	c.write(endFrame(b))
}

// unpend removes nc from the pending list (if still there) and reports
// whether it was there, i.e. not evicted. s.mu held.
func (s *Server) unpend(nc net.Conn) bool {
	for i, c := range s.pending {
		if c == nc {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return true
		}
	}
	return false
}

// park takes one blocked-request slot for a request with these key bytes,
// or reports that a cap is reached.
func (s *Server) park(keyBytes int) bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if (s.opt.MaxParked > 0 && s.parked >= s.opt.MaxParked) ||
		(s.opt.MaxParkedBytes > 0 && s.parkedBytes+keyBytes > s.opt.MaxParkedBytes) {
		return false
	}
	s.parked++
	s.parkedBytes += keyBytes
	return true
}

func (s *Server) unpark(keyBytes int) {
	s.pmu.Lock()
	s.parked--
	s.parkedBytes -= keyBytes
	s.pmu.Unlock()
}

func (r *request) keyBytes() int {
	n := len(r.key)
	for _, k := range r.keys {
		n += len(k)
	}
	return n
}

// serve runs one connection: the hello, then its requests. Teardown waits for
// the requests it parked and releases the connection's counts.
func (s *Server) serve(nc net.Conn) {
	c := &conn{nc: nc, parked: make(map[uint64]context.CancelFunc)}
	ctx, cancel := context.WithCancel(context.Background())
	var parked sync.WaitGroup
	authed := false
	defer func() {
		nc.Close() // unblocks parked requests stuck writing
		cancel()   // wakes parked requests stuck waiting
		parked.Wait()
		s.mu.Lock()
		delete(s.conns, nc)
		s.unpend(nc)
		if authed {
			s.authed--
		}
		s.mu.Unlock()
		s.wg.Done()
	}()

	r := bufio.NewReaderSize(nc, 32<<10)
	if authed = s.handshake(nc, r); !authed {
		return
	}
	s.serveRequests(ctx, c, r, &parked)
}

// serveRequests reads and answers c's requests until the connection fails,
// goes idle or sends something it should not. Parked requests join parked.
func (s *Server) serveRequests(ctx context.Context, c *conn, r *bufio.Reader, parked *sync.WaitGroup) {
	idle := s.opt.IdleTimeout
	for {
		if idle > 0 {
			c.nc.SetReadDeadline(time.Now().Add(idle))
		}
		body, err := readFrame(r, maxFrame)
		if err != nil {
			return
		}
		req, err := decodeRequest(body)
		if err != nil {
			return // the peer is broken or hostile; nothing it sends can be trusted
		}
		switch {
		case req.op == opPing:
		case req.op == opCancel:
			c.mu.Lock()
			if stop := c.parked[req.id]; stop != nil {
				stop()
			}
			c.mu.Unlock()
		case req.blocking():
			if !s.serveBlocking(ctx, c, &req, parked) {
				return
			}
		default:
			payload, err := s.exec(ctx, &req)
			c.reply(req.id, payload, err)
		}
	}
}

// serveBlocking answers a Get or Wait at once when its keys exist, answers
// "limit" when no parking slot is free, and else parks it. It reports false
// when the request reuses the id of a parked one: the connection must close.
func (s *Server) serveBlocking(ctx context.Context, c *conn, req *request, parked *sync.WaitGroup) bool {
	// Answer at once when the keys exist: no slot needed.
	keys := req.keys
	if req.op == opGet {
		keys = []string{req.key}
	}
	if v, ok, err := s.mem.peek(keys); err != nil || ok {
		if req.op == opWait {
			v = nil
		}
		c.reply(req.id, v, err)
		return true
	}
	// Park in a goroutine so that this connection keeps reading:
	// the key may be set by this very client.
	c.mu.Lock()
	_, dup := c.parked[req.id]
	full := len(c.parked) >= maxParkedPerConn
	c.mu.Unlock()
	if dup {
		return false // ids of live requests are unique; a reuse is a broken client
	}
	kb := req.keyBytes()
	if full || !s.park(kb) {
		c.reply(req.id, nil, fmt.Errorf("%w: too many blocked requests (%d on this connection, caps %d per connection and %d in all); retry",
			ErrLimit, maxParkedPerConn, maxParkedPerConn, s.opt.MaxParked))
		return true
	}
	s.runParked(ctx, c, req, kb, parked)
	return true
}

// runParked runs req, which holds a parking slot of kb key bytes, in its own
// goroutine until it is answered or cancelled (opCancel or teardown).
func (s *Server) runParked(ctx context.Context, c *conn, req *request, kb int, parked *sync.WaitGroup) {
	opCtx, stop := context.WithCancel(ctx)
	c.mu.Lock()
	c.parked[req.id] = stop
	c.mu.Unlock()
	parked.Add(1)
	go func() {
		defer parked.Done()
		payload, err := s.exec(opCtx, req)
		c.mu.Lock()
		delete(c.parked, req.id)
		c.mu.Unlock()
		stop()
		s.unpark(kb)
		if errors.Is(err, ErrTimeout) {
			return // cancelled by the client, which no longer listens, or by teardown
		}
		c.reply(req.id, payload, err)
	}()
}

// handshake checks magic, version and token; it answers the client either way
// and reports whether the connection may proceed (it then counts against
// MaxConns).
func (s *Server) handshake(nc net.Conn, r *bufio.Reader) bool {
	if d := s.opt.AuthTimeout; d > 0 {
		nc.SetDeadline(time.Now().Add(d))
	}
	body, err := readFrame(r, maxHello)
	if err != nil {
		return false
	}
	ver, token, err := decodeHello(body)
	if err != nil {
		return false // not our protocol: say nothing
	}
	status, text := statusOK, ""
	switch {
	case ver != version:
		status, text = statusVersion, fmt.Sprintf("server speaks protocol version %d", version)
	case s.token != nil && subtle.ConstantTimeCompare(token, s.token) != 1:
		status, text = statusAuth, "wrong or missing token"
	}
	if status == statusOK {
		s.mu.Lock()
		switch {
		case !s.unpend(nc):
			status = statusClosed // evicted meanwhile; the conn is closed already
		case s.opt.MaxConns > 0 && s.authed >= s.opt.MaxConns:
			status, text = statusLimit, fmt.Sprintf("server has reached its cap of %d connections (MaxConns)", s.opt.MaxConns)
		default:
			s.authed++
		}
		s.mu.Unlock()
	}
	var w []byte
	if status == statusOK && s.opt.IdleTimeout > 0 {
		w = welcomeFrame(status, string(binary.BigEndian.AppendUint64(nil, uint64(s.opt.IdleTimeout.Milliseconds()))))
	} else {
		w = welcomeFrame(status, text)
	}
	if _, err := nc.Write(w); err != nil || status != statusOK {
		if status == statusOK {
			s.mu.Lock()
			s.authed--
			s.mu.Unlock()
		}
		return false
	}
	nc.SetDeadline(time.Time{}) // fails only on a closed conn, which the next read reports
	return true
}

// exec runs one request against the server's Memory and returns the response
// payload.
func (s *Server) exec(ctx context.Context, r *request) ([]byte, error) {
	switch r.op {
	case opSet:
		return nil, s.mem.Set(ctx, r.key, r.value)
	case opGet:
		return s.mem.Get(ctx, r.key)
	case opWait:
		return nil, s.mem.Wait(ctx, r.keys...)
	case opAdd:
		n, err := s.mem.Add(ctx, r.key, r.delta)
		return binary64(n), err
	case opCAS:
		v, err := s.mem.CompareSet(ctx, r.key, r.expected, r.value)
		if v == nil {
			return []byte{0}, err
		}
		return append([]byte{1}, v...), err
	case opDelete:
		ok, err := s.mem.Delete(ctx, r.key)
		if ok {
			return []byte{1}, err
		}
		return []byte{0}, err
	}
	return nil, fmt.Errorf("%w: op %d cannot be executed", ErrProtocol, r.op)
}
