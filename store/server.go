package store

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

const (
	// handshakeTimeout bounds how long a connection may stay unauthenticated.
	handshakeTimeout = 10 * time.Second
	// maxParked bounds the Get/Wait requests one connection may have blocked
	// at once; each costs the server a goroutine.
	maxParked = 1024
)

// Server serves a Memory store over TCP. Create it with Listen or Serve.
type Server struct {
	ln    net.Listener
	token []byte // nil: no authentication
	mem   *Memory
	done  chan struct{} // closed by Close

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup // accept loop and connections (each waits for its parked requests)
}

// Listen starts a server on addr ("host:port"; port 0 picks a free port; ""
// means "127.0.0.1:0"). An empty host means 127.0.0.1, not every interface:
// a store that must be reachable from other hosts has to name its interface
// (e.g. "0.0.0.0:29500").
// A non-empty token (at most MaxKeyLen bytes) must be presented by every
// client before any request; with an empty token any client is served.
func Listen(addr, token string) (*Server, error) {
	if len(token) > MaxKeyLen {
		return nil, &OpError{Op: "listen", Key: addr, Err: fmt.Errorf("%w: token of %d bytes exceeds %d", ErrProtocol, len(token), MaxKeyLen)}
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
	return Serve(ln, token), nil
}

// Serve serves on ln, which the Server owns from now on (Close closes it).
// token is as for Listen; a token over MaxKeyLen bytes admits no client.
func Serve(ln net.Listener, token string) *Server {
	s := &Server{ln: ln, mem: NewMemory(), done: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	if token != "" {
		s.token = []byte(token)
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

func (s *Server) serve(nc net.Conn) {
	c := &conn{nc: nc, parked: make(map[uint64]context.CancelFunc)}
	ctx, cancel := context.WithCancel(context.Background())
	var parked sync.WaitGroup
	defer func() {
		nc.Close() // unblocks parked requests stuck writing
		cancel()   // wakes parked requests stuck waiting
		parked.Wait()
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		s.wg.Done()
	}()

	r := bufio.NewReaderSize(nc, 32<<10)
	if !s.handshake(nc, r) {
		return
	}
	for {
		body, err := readFrame(r, maxFrame)
		if err != nil {
			return
		}
		req, err := decodeRequest(body)
		if err != nil {
			return // the peer is broken or hostile; nothing it sends can be trusted
		}
		switch {
		case req.op == opCancel:
			c.mu.Lock()
			if stop := c.parked[req.id]; stop != nil {
				stop()
			}
			c.mu.Unlock()
		case req.blocking():
			// Park in a goroutine so that this connection keeps reading:
			// the key may be set by this very client.
			opCtx, stop := context.WithCancel(ctx)
			c.mu.Lock()
			_, dup := c.parked[req.id]
			full := len(c.parked) >= maxParked
			if !dup && !full {
				c.parked[req.id] = stop
			}
			c.mu.Unlock()
			if dup {
				stop()
				return // ids of live requests are unique; a reuse is a broken client
			}
			if full {
				stop()
				c.reply(req.id, nil, fmt.Errorf("%w: over %d blocked requests on one connection", ErrProtocol, maxParked))
				continue
			}
			parked.Add(1)
			go func() {
				defer parked.Done()
				payload, err := s.exec(opCtx, &req)
				c.mu.Lock()
				delete(c.parked, req.id)
				c.mu.Unlock()
				stop()
				if errors.Is(err, ErrTimeout) {
					return // cancelled by the client, which no longer listens, or by teardown
				}
				c.reply(req.id, payload, err)
			}()
		default:
			payload, err := s.exec(ctx, &req)
			c.reply(req.id, payload, err)
		}
	}
}

// handshake checks magic, version and token; it answers the client either way
// and reports whether the connection may proceed.
func (s *Server) handshake(nc net.Conn, r *bufio.Reader) bool {
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
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
	if _, err := nc.Write(welcomeFrame(status, text)); err != nil || status != statusOK {
		return false
	}
	return nc.SetDeadline(time.Time{}) == nil
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
