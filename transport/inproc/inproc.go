// Package inproc is a Transport whose ranks are goroutines of one process.
// A Send hands its buffer to the matching Recv, which copies straight into the
// receiver's buffer: one copy per message, no allocation per message.
package inproc

import (
	"context"
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/transport"
)

type msg struct {
	tag  transport.Tag
	buf  []byte
	done chan error // receiver reports the outcome; buffered 1
}

// Group is the shared state of one set of in-process ranks.
type Group struct {
	n     int
	ch    [][]chan msg // ch[from][to]
	close []chan struct{}
	once  []sync.Once

	mu   sync.Mutex
	subs map[uint64]*Group
}

// New returns w connected transports, rank i at index i.
func New(w int) ([]transport.Transport, error) {
	if w < 1 {
		return nil, fmt.Errorf("inproc: world size %d < 1", w)
	}
	g := newGroup(w)
	out := make([]transport.Transport, w)
	for i := range out {
		out[i] = &Transport{g: g, rank: i}
	}
	return out, nil
}

func newGroup(w int) *Group {
	g := &Group{n: w, ch: make([][]chan msg, w), close: make([]chan struct{}, w), once: make([]sync.Once, w), subs: map[uint64]*Group{}}
	for i := range g.ch {
		g.ch[i] = make([]chan msg, w)
		for j := range g.ch[i] {
			g.ch[i][j] = make(chan msg)
		}
		g.close[i] = make(chan struct{})
	}
	return g
}

// Transport is one rank of a Group.
type Transport struct {
	g      *Group
	rank   int
	parent *Transport // for sub-transports: parent closure fails us too
	done   []chan error
	mu     sync.Mutex

	children []*Transport // sub-transports, closed with this one
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.Splitter  = (*Transport)(nil)
	_ transport.Namer     = (*Transport)(nil)
)

func (t *Transport) Rank() int    { return t.rank }
func (t *Transport) Size() int    { return t.g.n }
func (t *Transport) Name() string { return "inproc" }

// closedCh returns a channel closed when this rank or any ancestor closed.
func (t *Transport) closed() (chan struct{}, chan struct{}) {
	var pc chan struct{}
	if t.parent != nil {
		pc = t.parent.g.close[t.parent.rank]
	}
	return t.g.close[t.rank], pc
}

func (t *Transport) peerClosed(peer int) chan struct{} { return t.g.close[peer] }

func (t *Transport) doneChan() chan error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.done); n > 0 {
		c := t.done[n-1]
		t.done = t.done[:n-1]
		return c
	}
	return make(chan error, 1)
}

func (t *Transport) putDone(c chan error) {
	t.mu.Lock()
	t.done = append(t.done, c)
	t.mu.Unlock()
}

func (t *Transport) fail(op string, peer int, err error) error {
	return &transport.Error{Op: op, Rank: t.rank, Peer: peer, Err: err}
}

func (t *Transport) Send(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if err := transport.CheckPeer("send", t.rank, t.g.n, peer); err != nil {
		return err
	}
	mine, parent := t.closed()
	select {
	case <-mine:
		return t.fail("send", peer, transport.ErrClosed)
	default:
	}
	d := t.doneChan()
	select {
	case t.g.ch[t.rank][peer] <- msg{tag: tag, buf: buf, done: d}:
	case <-ctx.Done():
		t.putDone(d)
		return t.fail("send", peer, ctx.Err())
	case <-mine:
		t.putDone(d)
		return t.fail("send", peer, transport.ErrClosed)
	case <-parent:
		t.putDone(d)
		return t.fail("send", peer, transport.ErrClosed)
	case <-t.peerClosed(peer):
		t.putDone(d)
		return t.fail("send", peer, transport.ErrPeerClosed)
	}
	// The receiver owns the message now; it always answers on d promptly
	// (the copy is synchronous), so waiting here cannot hang.
	err := <-d
	t.putDone(d)
	if err != nil {
		return t.fail("send", peer, err)
	}
	return nil
}

func (t *Transport) Recv(ctx context.Context, peer int, tag transport.Tag, buf []byte) error {
	if err := transport.CheckPeer("recv", t.rank, t.g.n, peer); err != nil {
		return err
	}
	mine, parent := t.closed()
	select {
	case <-mine:
		return t.fail("recv", peer, transport.ErrClosed)
	default:
	}
	var m msg
	select {
	case m = <-t.g.ch[peer][t.rank]:
	case <-ctx.Done():
		return t.fail("recv", peer, ctx.Err())
	case <-mine:
		return t.fail("recv", peer, transport.ErrClosed)
	case <-parent:
		return t.fail("recv", peer, transport.ErrClosed)
	case <-t.peerClosed(peer):
		return t.fail("recv", peer, transport.ErrPeerClosed)
	}
	var err error
	switch {
	case m.tag != tag:
		err = &transport.TagError{Got: m.tag, Want: tag}
	case len(m.buf) != len(buf):
		err = fmt.Errorf("%w: got %d bytes, want %d", transport.ErrSizeMismatch, len(m.buf), len(buf))
	default:
		copy(buf, m.buf)
	}
	m.done <- err
	if err != nil {
		return t.fail("recv", peer, err)
	}
	return nil
}

// Close is idempotent; peers blocked on this rank fail with ErrPeerClosed.
func (t *Transport) Close() error {
	t.g.once[t.rank].Do(func() { close(t.g.close[t.rank]) })
	t.mu.Lock()
	kids := t.children
	t.children = nil
	t.mu.Unlock()
	for _, c := range kids {
		c.Close()
	}
	return nil
}

// Sub returns the sub-group transport; all members must pass the same id and ranks.
func (t *Transport) Sub(ctx context.Context, id uint64, ranks []int) (transport.Transport, error) {
	me, err := transport.SubRank(t.rank, t.g.n, ranks)
	if err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
	}
	t.g.mu.Lock()
	sg, ok := t.g.subs[id]
	if !ok {
		sg = newGroup(len(ranks))
		t.g.subs[id] = sg
	}
	t.g.mu.Unlock()
	if sg.n != len(ranks) {
		return nil, fmt.Errorf("inproc: sub-group %#x has %d ranks, this call names %d", id, sg.n, len(ranks))
	}
	sub := &Transport{g: sg, rank: me, parent: t}
	t.mu.Lock()
	t.children = append(t.children, sub)
	t.mu.Unlock()
	select {
	case <-t.g.close[t.rank]:
		sub.Close()
	default:
	}
	return sub, nil
}
