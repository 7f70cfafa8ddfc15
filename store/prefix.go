package store

import (
	"context"
	"errors"
)

// Prefix returns a view of s in which every key becomes prefix+key, so that
// independent groups can share one store. Closing the view makes its own
// later and blocked calls fail with ErrClosed; s stays open.
func Prefix(s Store, prefix string) Store {
	life, kill := context.WithCancel(context.Background())
	return &prefixed{s: s, prefix: prefix, life: life, kill: kill}
}

type prefixed struct {
	s      Store
	prefix string
	life   context.Context // done once the view is closed
	kill   context.CancelFunc
}

// bind derives a ctx that is also cancelled when the view is closed, which is
// how Close wakes calls blocked in the underlying store.
func (p *prefixed) bind(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// fix turns a failure caused by the view's Close (which reaches the
// underlying store as a cancelled ctx) into ErrClosed.
func (p *prefixed) fix(op, key string, outer context.Context, err error) error {
	if err != nil && p.life.Err() != nil && outer.Err() == nil && errors.Is(err, ErrTimeout) {
		return opError(op, key, ErrClosed)
	}
	return err
}

func (p *prefixed) closedErr(op, key string) error {
	if p.life.Err() != nil {
		return opError(op, key, ErrClosed)
	}
	return nil
}

func (p *prefixed) Set(ctx context.Context, key string, value []byte) error {
	key = p.prefix + key
	if err := p.closedErr("set", key); err != nil {
		return err
	}
	c, done := p.bind(ctx)
	defer done()
	return p.fix("set", key, ctx, p.s.Set(c, key, value))
}

func (p *prefixed) Get(ctx context.Context, key string) ([]byte, error) {
	key = p.prefix + key
	if err := p.closedErr("get", key); err != nil {
		return nil, err
	}
	c, done := p.bind(ctx)
	defer done()
	v, err := p.s.Get(c, key)
	return v, p.fix("get", key, ctx, err)
}

func (p *prefixed) Wait(ctx context.Context, keys ...string) error {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	if err := p.closedErr("wait", joinKeys(full)); err != nil {
		return err
	}
	c, done := p.bind(ctx)
	defer done()
	return p.fix("wait", joinKeys(full), ctx, p.s.Wait(c, full...))
}

func (p *prefixed) Add(ctx context.Context, key string, delta int64) (int64, error) {
	key = p.prefix + key
	if err := p.closedErr("add", key); err != nil {
		return 0, err
	}
	c, done := p.bind(ctx)
	defer done()
	n, err := p.s.Add(c, key, delta)
	return n, p.fix("add", key, ctx, err)
}

func (p *prefixed) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	key = p.prefix + key
	if err := p.closedErr("compareset", key); err != nil {
		return nil, err
	}
	c, done := p.bind(ctx)
	defer done()
	v, err := p.s.CompareSet(c, key, expected, desired)
	return v, p.fix("compareset", key, ctx, err)
}

func (p *prefixed) Delete(ctx context.Context, key string) (bool, error) {
	key = p.prefix + key
	if err := p.closedErr("delete", key); err != nil {
		return false, err
	}
	c, done := p.bind(ctx)
	defer done()
	ok, err := p.s.Delete(c, key)
	return ok, p.fix("delete", key, ctx, err)
}

// Close closes the view only; it is idempotent and returns nil.
func (p *prefixed) Close() error {
	p.kill()
	return nil
}
