package store

import "context"

// Store is a rendezvous key-value store shared by the ranks of a job. See the
// package doc for the contract every implementation keeps.
type Store interface {
	Set(ctx context.Context, key string, value []byte) error
	// Get blocks until key exists (or ctx is done) and returns its value.
	Get(ctx context.Context, key string) ([]byte, error)
	// Wait blocks until every key exists, or ctx is done (ErrTimeout
	// wrapping ctx.Err()).
	Wait(ctx context.Context, keys ...string) error
	// Add atomically adds delta to the int64 counter stored at key (missing
	// key = 0) and returns the new value. The value is stored as decimal
	// ASCII, like torch, so Get and Set interoperate with it.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareSet sets key to desired if its current value equals expected (a
	// missing key matches an empty/nil expected, like torch), and returns the
	// value now stored: desired on success, the current value on mismatch,
	// nil if the key is missing and stays missing.
	CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// Close releases the store; it is idempotent. Later calls fail with
	// ErrClosed and blocked calls are woken with ErrClosed.
	Close() error
}
