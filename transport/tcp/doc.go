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
// Before a connection carries frames, the dialer sends a 40-byte hello and
// the acceptor answers accept or reject (reason code). Both carry the magic
// "dcH1", protocol version, an FNV-1a 64 hash of the prefix, a hash of the
// sub-group's member list, both ranks, the group size and a CRC-32C, so a
// stray or mis-addressed connection is turned away: a non-detcoll peer is
// dropped unanswered; a wrong prefix or rank is rejected and the dialer
// retries (the address may be stale); a different protocol version or a
// duplicate rank fails the dialer at once; a different group size or member
// list under the same prefix fails Connect on both sides at once, since
// waiting cannot cure it.
//
// # Frames
//
// Every message is one frame: a 48-byte little-endian header
//
//	magic "dcF2" | tag phase uint32 | tag seq uint64 | tag sig uint64 | payload length uint64 | chunk shift uint8 |
//	7 reserved zero bytes | CRC-32C of the first chunk | CRC-32C of the header
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
// Send writes the header and each chunk with one writev (net.Buffers) on a
// TCP_NODELAY socket; for frames of two chunks or more a helper goroutine,
// started and joined within the call, computes the checksums ahead of the
// writes. Recv reads the header, checks it (magic, header checksum, reserved
// bytes, chunk shift: transport.ErrCorrupt), compares the tag and length
// with what the caller expects (transport.ErrTagMismatch,
// transport.ErrSizeMismatch) before touching the payload, then reads the
// payload straight into the caller's buffer, checksumming each read's bytes
// while they are in cache, and verifies every chunk (transport.ErrCorrupt).
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
// Every call honours its context: the context's deadline becomes the
// connection's read or write deadline for that direction, and cancellation
// sets a deadline in the past through context.AfterFunc. A call whose
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
// hosts can reach.
//
// # Security
//
// The handshake guards against mistakes, not attackers: there is no
// authentication or encryption. Use it on a trusted network.
//
// # Throughput
//
// RawLoopbackThroughput measures plain loopback TCP on this host, the
// ceiling for this package; bench_test.go compares both (BenchmarkStream,
// BenchmarkPingPong against BenchmarkRawStream, BenchmarkRawPingPong).
package tcp
