package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client is a Store served by a Server over one TCP connection. It is safe
// for concurrent use: requests carry ids, so a Get blocked on the server does
// not hold up other goroutines' requests on the same Client.
type Client struct {
	addr string
	nc   net.Conn
	wq   chan []byte   // frames for the writer; unbuffered so a caller can give up while queued
	kick chan struct{} // tells the writer that cancels has entries
	done chan struct{} // closed by fail
	wg   sync.WaitGroup
	// keepalive is how long the writer may stay silent before it sends a
	// ping: a third of the server's idle timeout; 0 when it has none.
	keepalive time.Duration

	mu      sync.Mutex
	err     error // why the client stopped; wraps ErrClosed
	nextID  uint64
	pending map[uint64]chan result // by request id
	cancels []uint64               // ids of abandoned get/wait to cancel on the server
}

type result struct {
	status  byte
	payload []byte
}

var _ Store = (*Client)(nil)

// Dial connects to the server at addr and authenticates with token. It retries
// (with backoff up to 0.5 s) until it succeeds or ctx is done, because workers
// often start before the server; ErrAuth, ErrProtocol and ErrLimit (the
// server is at its connection cap) end it at once.
func Dial(ctx context.Context, addr, token string) (*Client, error) {
	if len(token) > MaxKeyLen {
		return nil, opError("dial", addr, fmt.Errorf("%w: token of %d bytes exceeds %d", ErrProtocol, len(token), MaxKeyLen))
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, opError("dial", addr, err) // retrying cannot fix the address
	}
	retry := 10 * time.Millisecond
	for {
		c, err := dial(ctx, addr, token)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrLimit) {
			return nil, opError("dial", addr, err)
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, opError("dial", addr, fmt.Errorf("%w (last attempt: %v)", timeout(ctx), err))
		case <-t.C:
		}
		retry = min(2*retry, 500*time.Millisecond)
	}
}

func dial(ctx context.Context, addr, token string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// ctx bounds the handshake: when it ends, the deadline passes.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	r := bufio.NewReaderSize(nc, 32<<10)
	idle, err := handshake(nc, r, token)
	if !stop() && err == nil {
		err = timeout(ctx) // the deadline may have been set after the handshake: the conn is unusable
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &Client{
		addr:    addr,
		nc:      nc,
		wq:      make(chan []byte),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		pending: make(map[uint64]chan result),
	}
	if idle > 0 {
		c.keepalive = max(idle/3, time.Millisecond)
	}
	c.wg.Add(2)
	go c.read(r)
	go c.write()
	return c, nil
}

// handshake sends the hello and reads the welcome; it returns the server's
// idle timeout (0 when it announces none).
func handshake(nc net.Conn, r *bufio.Reader, token string) (time.Duration, error) {
	if _, err := nc.Write(helloFrame(token)); err != nil {
		return 0, err
	}
	body, err := readFrame(r, len(magic)+2+maxErrorText)
	if err != nil {
		return 0, err
	}
	_, status, text, err := decodeWelcome(body)
	if err != nil {
		return 0, err
	}
	if status != statusOK {
		return 0, errorOf(status, text)
	}
	if len(text) == 8 {
		return time.Duration(binary.BigEndian.Uint64(text)) * time.Millisecond, nil
	}
	return 0, nil
}

// fail stops the client for good: later and pending calls return err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
		c.nc.Close()
	}
}

func (c *Client) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) lost(err error) {
	c.fail(fmt.Errorf("%w: connection to %s lost: %w", ErrClosed, c.addr, err))
}

func (c *Client) read(r *bufio.Reader) {
	defer c.wg.Done()
	for {
		body, err := readFrame(r, maxFrame)
		var (
			id uint64
			rs result
		)
		if err == nil {
			id, rs.status, rs.payload, err = decodeResponse(body)
		}
		if err != nil {
			c.lost(err)
			return
		}
		// Deliver under mu: forget can then tell "delivered" from "pending".
		c.mu.Lock()
		if ch, ok := c.pending[id]; ok {
			delete(c.pending, id)
			ch <- rs // cap 1, never blocks
		} // else: the caller gave up on it
		c.mu.Unlock()
	}
}

func (c *Client) write() {
	defer c.wg.Done()
	var tick <-chan time.Time
	var timer *time.Timer
	if c.keepalive > 0 {
		timer = time.NewTimer(c.keepalive)
		defer timer.Stop()
		tick = timer.C
	}
	ping := (&request{op: opPing}).frame()
	for {
		var b []byte
		select {
		case b = <-c.wq:
		case <-c.kick:
			c.mu.Lock()
			for _, id := range c.cancels {
				b = (&request{op: opCancel, id: id}).appendBody(binary.BigEndian.AppendUint32(b, 1+8))
			}
			c.cancels = c.cancels[:0]
			c.mu.Unlock()
		case <-tick:
			b = ping
		case <-c.done:
			return
		}
		if _, err := c.nc.Write(b); err != nil {
			c.lost(err)
			return
		}
		if timer != nil {
			timer.Reset(c.keepalive)
		}
	}
}

// forget drops a pending request and reports whether it was still pending;
// false means its result is in its channel.
func (c *Client) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

// do sends req and waits for its response. When ctx ends first it returns
// promptly; a parked get/wait is then cancelled on the server, and the
// connection stays usable. A request that was already sent may still take
// effect.
func (c *Client) do(ctx context.Context, req *request) (result, error) {
	ch := make(chan result, 1)
	c.mu.Lock()
	if c.err != nil {
		defer c.mu.Unlock()
		return result{}, c.err
	}
	if ctx.Err() != nil {
		c.mu.Unlock()
		return result{}, timeout(ctx)
	}
	c.nextID++
	req.id = c.nextID
	c.pending[req.id] = ch
	c.mu.Unlock()

	select {
	case c.wq <- req.frame():
	case <-ctx.Done():
		c.forget(req.id)
		return result{}, timeout(ctx)
	case <-c.done:
		c.forget(req.id)
		return result{}, c.failure()
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		if !c.forget(req.id) {
			return <-ch, nil
		}
		if req.blocking() {
			c.mu.Lock()
			c.cancels = append(c.cancels, req.id)
			c.mu.Unlock()
			select {
			case c.kick <- struct{}{}:
			default: // a kick is already pending; it will take this id too
			}
		}
		return result{}, timeout(ctx)
	case <-c.done:
		if !c.forget(req.id) {
			return <-ch, nil
		}
		return result{}, c.failure()
	}
}

// call checks limits, runs req and returns the payload of a successful
// response; every error is an *OpError.
func (c *Client) call(ctx context.Context, req *request, checks ...error) ([]byte, error) {
	err := errors.Join(checks...)
	var r result
	if err == nil {
		r, err = c.do(ctx, req)
		// A Get/Wait the server had no room to park: poll until it has.
		for retry := 5 * time.Millisecond; err == nil && r.status == statusLimit && req.blocking(); retry = min(2*retry, 500*time.Millisecond) {
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				err = timeout(ctx)
			case <-c.done:
				t.Stop()
				err = c.failure()
			case <-t.C:
				r, err = c.do(ctx, req)
			}
		}
	}
	if err == nil && r.status != statusOK {
		err = errorOf(r.status, r.payload)
	}
	if err != nil {
		return nil, &OpError{Op: opNames[req.op], Key: req.label(), Err: err}
	}
	return r.payload, nil
}

// malformed handles a response that does not fit its request: the server or
// the stream is broken, so the client stops.
func (c *Client) malformed(req *request, p []byte) error {
	err := fmt.Errorf("%w: %d-byte response to %s", ErrProtocol, len(p), opNames[req.op])
	c.fail(fmt.Errorf("%w: %w", ErrClosed, err))
	return &OpError{Op: opNames[req.op], Key: req.label(), Err: err}
}

func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	req := &request{op: opSet, key: key, value: value}
	p, err := c.call(ctx, req, checkKey(key), checkValue(value))
	if err == nil && len(p) != 0 {
		err = c.malformed(req, p)
	}
	return err
}

func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	return c.call(ctx, &request{op: opGet, key: key}, checkKey(key))
}

func (c *Client) Wait(ctx context.Context, keys ...string) error {
	req := &request{op: opWait, keys: keys}
	p, err := c.call(ctx, req, checkKeys(keys))
	if err == nil && len(p) != 0 {
		err = c.malformed(req, p)
	}
	return err
}

func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	req := &request{op: opAdd, key: key, delta: delta}
	p, err := c.call(ctx, req, checkKey(key))
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, c.malformed(req, p)
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

func (c *Client) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	req := &request{op: opCAS, key: key, expected: expected, value: desired}
	p, err := c.call(ctx, req, checkKey(key), checkValue(expected), checkValue(desired))
	switch {
	case err != nil:
		return nil, err
	case len(p) == 1 && p[0] == 0:
		return nil, nil // missing, and still missing
	case len(p) >= 1 && p[0] == 1:
		return p[1:], nil
	}
	return nil, c.malformed(req, p)
}

func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	req := &request{op: opDelete, key: key}
	p, err := c.call(ctx, req, checkKey(key))
	if err != nil {
		return false, err
	}
	if len(p) != 1 || p[0] > 1 {
		return false, c.malformed(req, p)
	}
	return p[0] == 1, nil
}

// Close closes the connection, fails pending calls with ErrClosed and waits
// for the client's goroutines. It is idempotent and returns nil.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}
