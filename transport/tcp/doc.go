// Package tcp is a transport.Transport over TCP: the ranks of a group form a
// full mesh with one connection per pair of ranks, within a host (loopback)
// or across hosts.
//
// # Rendezvous
//
// Connect(ctx, st, prefix, rank, size, opt) finds the peers through st, any
// key-value store with a blocking Get (store.Store is one; see Rendezvous).
// Every rank that has higher ranks listens on Options.Host, port chosen by
// the kernel, and publishes "ip:port" under prefix+"/addr/<rank>", the only
// key it writes; every rank dials each lower rank at the address it reads
// there, retrying (and re-reading the key) until Options.DialTimeout. The
// listener is closed as soon as all higher ranks are in. Sub-groups made by
// Sub use prefix+"/sub/<id>" (prefix+"/sub/<id>#<n>" when this parent reuses
// id for the n-th time), so keys never collide and the rendezvous is fresh.
//
// Before a connection carries frames, the dialer sends a 108-byte hello and
// the acceptor answers. Every handshake message carries the magic "dcH2",
// the protocol version, an FNV-1a 64 hash of the prefix, a hash of the
// sub-group's member list, both ranks, the group size, flags, a nonce, a MAC
// and a CRC-32C, so a stray or mis-addressed connection is turned away: a
// non-detcoll peer is dropped unanswered; a wrong prefix or rank is rejected
// and the dialer retries (the address may be stale); a different protocol
// version or a duplicate rank fails the dialer at once; a different group
// size or member list under the same prefix fails Connect on both sides at
// once, since waiting cannot cure it.
//
// # Authentication
//
// With Options.Token (the job's shared secret; package cluster passes the
// store's DETCOLL_TOKEN) the handshake is a mutual challenge/response:
//
//	dialer → acceptor  hello      (its fields, the dialer's fresh 32-byte nonce)
//	acceptor → dialer  challenge  (its fields, its own fresh nonce, MAC_A)
//	dialer → acceptor  auth       (MAC_D)
//	acceptor → dialer  accept or reject
//
// MAC_A and MAC_D are HMAC-SHA256 under the token over a role label, the key
// prefix, and the hello and the challenge as sent (prefix hash, member-list
// hash, both ranks, both sides' group size, both nonces). The dialer checks
// MAC_A before it sends MAC_D; the acceptor acts on nothing in the hello (not
// its rank, not its size) until MAC_D verifies. A peer without the token, or
// replaying a recorded handshake (the other side's nonce is new), is dropped
// and Connect goes on waiting for the real rank: an impostor can neither take
// a rank's place nor abort the job by claiming a wrong group size. A rank
// that has a token meeting one that has none is rejected (reason: auth) and
// retries until DialTimeout; the error says why.
//
// Connections still in their handshake are limited in number (64; a new
// one closes the oldest, so a flood of silent connections cannot use up
// descriptors while the real rank, which answers at once, is still to come)
// and in time (10 s each).
//
// Without a token the handshake is two messages (hello, accept or reject)
// and guards against mistakes, not attackers: whoever can reach a listener
// and knows the group's prefix can take a missing rank's place, and a hello
// with a wrong group size fails Connect. That is fine for single-host
// development among trusted users; see docs/security.md.
//
// # Frames
//
// Every message is one frame: a 48-byte little-endian header
//
//	magic "dcF2" | tag phase uint32 | tag seq uint64 | tag sig uint64 | payload length uint64 | chunk shift uint8 |
//	flags uint8 | 6 reserved zero bytes | CRC-32C of the first chunk | CRC-32C of the header
//
// then the payload in chunks of 1<<shift bytes (one chunk when shift is 0),
// every chunk after the first preceded by its own 4-byte CRC-32C. The sender
// picks the chunk size (Options.ChunkSize, default 512 KiB; receivers accept
// any). Chunks let the checksum run while earlier chunks are on the wire
// and while they are in cache: streaming 64 MiB messages over loopback, one
// checksum per frame reached about 60–65% of raw TCP, 512 KiB chunks with
// the sender's checksum helper (below) 95–100%. CRC-32C (Castagnoli) uses
// the CPU's CRC instructions through hash/crc32.
//
// On a loopback connection (both ends' addresses loopback) the payload goes
// without checksums by default (Options.Checksum, $DETCOLL_TCP_CHECKSUM):
// flags bit 0 set, shift and CRC zero, the payload bytes alone after the
// header. Nothing between two sockets of one kernel can flip a bit that a
// CRC would catch and the CPU's memory copies would not, and the checksum
// was a sixth of a large loopback transfer's CPU time
// (docs/benchmarks/tcp-loopback.md). The header keeps its checksum, and a
// receiver accepts either kind of frame from any sender.
//
// Send writes the header and each chunk with one writev (net.Buffers) on a
// TCP_NODELAY socket; for frames of two chunks or more a helper goroutine,
// started and joined within the call, computes the checksums ahead of the
// writes. Recv reads through a 32 KiB buffer per peer, so a small frame's
// header and payload arrive with one read syscall; it checks the header
// (magic, header checksum, reserved bytes, chunk shift, flags:
// transport.ErrCorrupt), compares the tag and length with what the caller
// expects (transport.ErrTagMismatch, transport.ErrSizeMismatch) before
// touching the payload, then reads the payload into the caller's buffer
// (reads of 32 KiB or more go straight there, bypassing the buffer),
// checksumming each read's bytes while they are in cache, and verifies every
// chunk (transport.ErrCorrupt) of a frame that carries checksums. On
// Linux a read that finds the socket empty polls it, with sched_yield
// between attempts, for up to Options.Poll (200 µs by default) before the
// runtime parks the goroutine in the netpoller: on loopback the park and
// wake-up cost more than a small message (docs/benchmarks/tcp-loopback.md,
// "Polling before the park"). A cancelled context or Close is seen when
// that budget is spent.
//
// Exchange runs one collective step with every peer (a send to and a
// receive from each) the way a goroutine per Send and Recv would, but
// without goroutines for messages of at most 256 KiB, and for every message
// over loopback in a process with one P: such frames are written with one
// non-blocking writev from the calling goroutine and received on it, after
// every send has started. Over loopback the goroutine hand-offs it avoids
// cost more per 4 KiB message than the transport itself
// (docs/benchmarks/tcp-lean-2026-12-01.md), and on large messages the
// threads they add compete with the peers for the cores. The non-blocking
// reads and writes are raw system calls, so that a long copy does not hand
// the P to another thread (docs/benchmarks/tcp-loopback.md, "Raw syscalls
// and every message inline"). Over loopback in a process with one P,
// Exchange moves the step in one progress loop: it writes what each socket
// takes and reads what each holds, peer after peer, without waiting on
// any, and only a loop that moves nothing for the poll budget hands the
// rest to the blocking path; with loopback send buffers of
// LoopbackWriteBuffer this took 30–40 % off large exchanges ("Send buffer
// and one progress loop").
// Nothing is ever allocated from a length on the wire, and with a context
// that cannot be cancelled (such as context.Background) Send and Recv
// allocate nothing at all.
//
// # Concurrency
//
// As the transport contract says: Send to different peers and Recv from
// different peers run concurrently, and Send and Recv with the same peer
// run concurrently (each direction has its own lock, buffers and deadline).
// More than one Send (or Recv) per peer at a time is a caller error; this
// package serialises such calls rather than interleaving frames.
//
// # Contexts
//
// Every call honours its context: when the context ends (cancelled, or its
// deadline passed) a context.AfterFunc callback sets a deadline in the past
// on that direction of the connection, which makes the pending read or
// write return; the connection carries no deadline of its own during a
// call, so a call with a deadline costs no deadline update. A call whose
// context ends before any byte of its frame moved returns the context's
// error and leaves the connection usable. One whose context ends in the
// middle of a frame returns an error matching both the context error and
// ErrBroken: the stream is out of step, so the connection is closed, the
// peer's calls fail with transport.ErrPeerClosed, and later calls on it fail
// with ErrBroken.
//
// # Errors
//
// Errors of Send and Recv are *transport.Error values with Op "send" or
// "recv", this rank and the peer; Connect's have Op "connect", Sub's "sub".
// Test them with errors.Is against the transport sentinels:
// ErrInvalidPeer, ErrTagMismatch, ErrSizeMismatch, ErrCorrupt, ErrPeerClosed
// (the peer closed or reset the connection, or died mid-frame), ErrClosed
// (this transport was closed), and ErrBroken (an earlier error on this peer
// connection). Any error other than a context error before the frame started
// closes that peer connection, so both ends learn of it at once.
//
// # Close
//
// Close is idempotent. It closes every connection and every sub-transport
// made by Sub and aborts a Sub in progress; this rank's pending and later
// calls fail with transport.ErrClosed, peers' calls involving it with
// transport.ErrPeerClosed. A Transport runs no goroutines of its own between
// calls, so nothing is left running after Close.
//
// # Environment
//
// DETCOLL_TCP_HOST supplies Options.Host when that is empty; without either
// the transport listens on and advertises 127.0.0.1, which only reaches
// ranks on the same host. Set it to an address of this host that the other
// hosts can reach. DETCOLL_TCP_CHECKSUM=always makes Options.Checksum
// ChecksumAlways when it is ChecksumAuto (payload checksums on loopback too).
// DETCOLL_TCP_POLL_US supplies Options.Poll in microseconds when that is
// zero (0: no polling). DETCOLL_TCP_SNDBUF supplies Options.WriteBuffer in
// bytes when that is zero (0: the system's default, as on connections that
// are not loopback; unset: LoopbackWriteBuffer on loopback).
//
// # Security
//
// The token authenticates who connects; it does not encrypt or
// integrity-protect the frames that follow (CRC-32C, where a frame carries
// it, catches accidents, not forgery), so an attacker on the path between two hosts can still read and
// alter traffic. Use a trusted network, and a token whenever other users can
// reach the listeners. docs/security.md has the whole picture.
//
// # Throughput
//
// RawLoopbackThroughput measures plain loopback TCP on this host, the
// ceiling for this package; bench_test.go compares both (BenchmarkStream,
// BenchmarkPingPong against BenchmarkRawStream, BenchmarkRawPingPong).
package tcp
