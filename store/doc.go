// Package store is the rendezvous key-value store through which the ranks of
// a job find each other, in the manner of torch's TCPStore: one process runs
// a Server, every rank Dials it with a Client, and all of them see one map
// from string keys to byte values. Memory is the same store inside one
// process; Prefix namespaces a store so that groups can share it.
//
// # Semantics
//
// Set stores a copy of the value; Get blocks until the key exists, then
// returns a copy (empty values come back as non-nil empty slices). Wait
// returns once all its keys exist at the same moment. Add treats the value as
// a decimal ASCII int64 (a missing key counts as 0), exactly like torch, so a
// counter can be read with Get and seeded with Set; a value that does not
// parse, or a sum that would overflow, is ErrBadCounter. CompareSet stores
// desired if the current value equals expected, where a missing key matches a
// nil or empty expected, and returns the value stored afterwards (desired on
// success, the current value otherwise, nil while the key is missing). Every
// single operation is atomic; a Client's operation has taken effect when it
// returns without error, so a Set that returned is visible to every Get that
// starts later, on any connection.
//
// # Concurrency and cancellation
//
// Memory, Client and Prefix views are safe for concurrent use. A Get or Wait
// blocked on the server does not delay other requests, whether from other
// connections or from other goroutines on the same Client. Every call honours
// its ctx: when ctx ends first the call returns promptly with an error
// matching both ErrTimeout and ctx.Err(), a blocked Get or Wait is withdrawn
// from the server, and the Client stays usable. A write whose ctx ended after
// it was sent may still take effect. A done ctx fails the call even if it
// could have completed at once.
//
// # Errors
//
// Every error of an operation is an *OpError naming the operation and key and
// wrapping one of ErrAuth, ErrClosed, ErrTimeout, ErrProtocol, ErrBadCounter,
// ErrLimit (test with errors.Is). Close is idempotent; afterwards every call fails
// with ErrClosed, and calls blocked at the time are woken with ErrClosed. A
// Client whose connection breaks (the server closed or died, or the stream
// went bad) fails every pending and later call with ErrClosed and says why;
// it never reconnects, since a new server would not have the old keys. Dial
// retries until ctx ends, so workers may start before the server; a wrong or
// missing token is ErrAuth at once.
//
// # Limits
//
// A key (and a token) is at most MaxKeyLen (64 KiB) bytes, a value at most
// MaxValueLen (64 MiB); one Wait's keys total at most MaxWaitLen, counting 4
// bytes per key. Every Store rejects larger requests with ErrProtocol before
// sending or storing anything. The server enforces the same limits on the
// wire, grows buffers as data arrives rather than as headers claim, and
// drops any connection that sends a malformed frame.
//
// A Server also caps what clients can make it hold (ServerOptions, with the
// defaults in brackets): connections that have not finished their hello
// [64; the oldest is closed to make room] and the time they get for it
// [10 s]; authenticated connections [1024; the next is refused, Dial fails
// with ErrLimit]; idle time of a connection [5 min; Clients send keepalives,
// so only dead or foreign peers are cut]; blocked Get/Wait requests [4096 in
// all, 1024 per connection, 16 MiB of keys; beyond, the server answers
// "limit" and the Client retries the request until its ctx ends, so callers
// only see a slower wake-up]; and stored bytes of keys and values [1 GiB;
// writes beyond fail with ErrLimit]. With the defaults, 100 connections each
// parking 1024 Gets take a server from 7 MB to 50 MB of RSS instead of 581 MB
// (TestParkedFloodRSSBounded).
//
// # Security
//
// The token is a shared secret that keeps stray or foreign processes out; it
// is not encryption and not integrity protection: it crosses the network in
// the clear, as does everything else, and anyone who can read the traffic
// can read the store. Run a standalone store on 127.0.0.1 (Listen's default
// for an empty host); bind another interface only on a trusted network, and
// then always with a token.
package store
