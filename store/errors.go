package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Size limits, enforced by every Store (Memory included) so that code tested
// against Memory behaves the same over TCP. A request over a limit fails with
// ErrProtocol before anything is sent or allocated.
const (
	MaxKeyLen   = 64 << 10 // bytes in one key, and in a token
	MaxValueLen = 64 << 20 // bytes in one value (and in CompareSet's expected)
	// MaxWaitLen bounds one Wait: the sum over its keys of 4+len(key).
	MaxWaitLen = MaxValueLen
)

// Sentinel errors; test with errors.Is. Every error returned by a Store
// operation is an *OpError wrapping one of these, a context error, or both.
var (
	ErrAuth     = errors.New("authentication failed")
	ErrClosed   = errors.New("store closed")
	ErrTimeout  = errors.New("timeout")
	ErrProtocol = errors.New("protocol violation")
	// ErrBadCounter: Add found a value that is not a decimal int64, or the
	// sum would overflow int64.
	ErrBadCounter = errors.New("not an int64 counter")
	// ErrLimit: a Server's cap was reached (connections, stored bytes; see
	// ServerOptions). Dial fails with it when the server is at MaxConns, a
	// write when the store is at MaxBytes. Blocked-request caps never
	// surface: the Client retries those itself.
	ErrLimit = errors.New("server limit reached")
)

// OpError reports which operation on which key failed. For Wait, Key is the
// keys joined with ","; for Dial and Listen it is the address.
type OpError struct {
	Op  string // "set", "get", "wait", "add", "compareset", "delete", "dial", "listen"
	Key string
	Err error
}

func (e *OpError) Error() string {
	return fmt.Sprintf("store: %s %s: %v", e.Op, quote(e.Key), e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

func opError(op, key string, err error) error { return &OpError{Op: op, Key: key, Err: err} }

// quote shows at most 80 bytes of a key or value: keys may be 64 KiB of binary.
func quote[T string | []byte](s T) string {
	const show = 80
	if len(s) <= show {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…(%d bytes)", s[:show], len(s))
}

// timeout is the error of an operation whose ctx is done: it matches both
// ErrTimeout and ctx.Err() (context.Canceled or context.DeadlineExceeded).
func timeout(ctx context.Context) error { return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err()) }

func checkKey(key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes exceeds %d", ErrProtocol, len(key), MaxKeyLen)
	}
	return nil
}

func checkValue(v []byte) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: value of %d bytes exceeds %d", ErrProtocol, len(v), MaxValueLen)
	}
	return nil
}

func checkKeys(keys []string) error {
	n := 0
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
		n += 4 + len(k)
	}
	if n > MaxWaitLen {
		return fmt.Errorf("%w: wait for %d keys (%d bytes) exceeds %d", ErrProtocol, len(keys), n, MaxWaitLen)
	}
	return nil
}

func joinKeys(keys []string) string { return strings.Join(keys, ",") }
