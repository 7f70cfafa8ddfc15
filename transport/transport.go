// Package transport is the layer that moves bytes between the ranks of one
// group. It knows nothing of dtypes, trees or floats: the schedule above it
// decides what goes where, reducers do the arithmetic.
//
// # Contract
//
// A Transport connects the ranks 0 … Size()-1 of one group. Messages are
// byte slices with a Tag (phase, call sequence number, signature hash). Between one ordered pair of ranks, messages
// arrive in the order they were sent. Recv names the tag and the exact length
// it expects; a message with another tag or length is an error
// (ErrTagMismatch, ErrSizeMismatch), which is how a rank detects that a peer
// is running a different collective.
//
// Thread safety: Send to different peers and Recv from different peers may
// run concurrently from different goroutines; at most one Send and one Recv
// per peer may be outstanding at a time. Send may block until the peer has
// received the message (callers must not rely on buffering), so symmetric
// exchanges run sends and receives concurrently.
//
// Buffer ownership: Send borrows buf until it returns; Recv writes only into
// buf and only before it returns.
//
// Errors: every blocking call honours its context. After any error other
// than a context error seen before the message started moving, the transport
// may be unusable; the communicator above treats it as poisoned. Close is
// idempotent, unblocks this rank's pending calls with ErrClosed, and makes
// peers' pending and later calls involving this rank fail (ErrPeerClosed or
// an I/O error) rather than hang.
package transport

import (
	"context"
	"errors"
	"fmt"
)

// Tag names a message: which step (Phase) of which call (Seq) of which
// collective (Sig). The layer above chooses the values; a transport only
// carries them and compares them for equality, so a receiver that expects
// another step, another call or another collective than the peer sent gets
// ErrTagMismatch before the payload is touched.
type Tag struct {
	Phase uint32 // the schedule step (gather, all-to-all, signature exchange, …)
	Seq   uint64 // the communicator's call sequence number
	Sig   uint64 // the full 64-bit hash of the collective's signature
}

func (t Tag) String() string {
	return fmt.Sprintf("phase %#x seq %d sig %#016x", t.Phase, t.Seq, t.Sig)
}

// Transport moves tagged byte messages between ranks. See the package doc.
type Transport interface {
	Rank() int
	Size() int
	Send(ctx context.Context, peer int, tag Tag, buf []byte) error
	Recv(ctx context.Context, peer int, tag Tag, buf []byte) error
	Close() error
}

// Splitter is implemented by transports that can carve a sub-group out of
// themselves without new rendezvous. Every member of the sub-group calls Sub
// with the same id and the same ranks (parent ranks; ranks[i] becomes sub-rank
// i). Traffic of the sub-transport never mixes with the parent's or with
// other sub-transports'. Closing the parent makes the sub-transports fail.
type Splitter interface {
	Sub(ctx context.Context, id uint64, ranks []int) (Transport, error)
}

// Exchanger is implemented by transports that can run one step of a
// collective with every peer at once more cheaply than a goroutine per Send
// and Recv: for every peer p it sends sendBuf(p) and receives recvBuf(p)
// under tag (skipping either when its ok result is false) and returns once
// all have finished. Errors go to report, which may be called from any
// goroutine and may cancel ctx to stop the rest; Exchange returns nothing
// itself. The ordering and buffer rules are those of Send and Recv.
type Exchanger interface {
	Exchange(ctx context.Context, tag Tag, sendBuf, recvBuf func(peer int) ([]byte, bool), report func(error))
}

// Sharer is implemented by transports whose ranks map common memory (the
// ranks of one host). Every rank has a window of two slots that every rank
// can read: a collective stages a block in its next slot, publishes it under
// a tag, and then reads every rank's block where it lies, with no copy into
// private memory (a reduce reads all W inputs in one pass).
//
// One goroutine at a time uses a transport's window, and every rank makes
// the same sequence of publications. The slots alternate, so a rank may
// hold the views of one publication while it stages the next (at most two
// unreleased); Stage waits until every rank has released the slot's
// previous publication. A failed Stage or Publish leaves the window unusable
// (the transport should be closed).
type Sharer interface {
	// WindowBytes is the capacity of one slot (0: this transport has no
	// window, e.g. a group of one).
	WindowBytes() int
	// Stage returns this rank's next slot, n bytes (n ≤ WindowBytes), for
	// the caller to fill.
	Stage(ctx context.Context, n int) ([]byte, error)
	// Publish makes the staged slot visible under tag and waits until every
	// rank has published its own. It returns every rank's block, rank p's
	// at index p (this rank's own slot included), read-only and valid until
	// the matching Release. A peer that published another tag fails it
	// with a *TagError (the peer's tag as Got) inside an *Error naming it.
	Publish(ctx context.Context, tag Tag) ([][]byte, error)
	// Release says this rank has finished reading the views of its oldest
	// unreleased publication.
	Release()
}

// Exposer is implemented by Sharer transports whose ranks may read each
// other's private memory (Linux cross-memory attach between the processes of
// one host). A rank exposes a buffer instead of staging a copy of it, and
// every peer copies what it needs straight out of it: one copy per block
// instead of one into a shared slot and one out of it.
//
// An exposure is Expose, Exposed, any number of ReadExposed, Unexpose. It is
// a window publication: the Sharer rules (one goroutine, the same sequence
// on every rank) hold, and Expose needs every earlier publication released.
// From Expose on, peers may read buf: the caller must not write it, nor let
// it go, until Exposed fails or Unexpose returns, whatever Unexpose returns.
type Exposer interface {
	// Expose publishes buf's address and length (not its bytes) under tag
	// and returns without waiting for the peers, so the caller may work
	// while they arrive. On failure nothing is exposed.
	Expose(ctx context.Context, tag Tag, buf []byte) error
	// Exposed waits until every rank has exposed its buffer and returns
	// their lengths, rank p's at index p (the transport's slice, valid
	// until the next Exposed). On failure the exposure is over
	// (no Unexpose): with ErrNoExpose, which every rank gets for the same
	// call when some rank cannot read some peer's memory or declines (the
	// transport's own rule), the window stays usable (the caller stages
	// copies instead); any other error leaves it unusable.
	Exposed(ctx context.Context) ([]int, error)
	// ReadExposed copies len(dst) bytes from offset off of rank p's exposed
	// buffer into dst. It fails, and leaves the window unusable, when the
	// range is outside the buffer or p withdrew it before the copy ended.
	ReadExposed(p, off int, dst []byte) error
	// Unexpose says this rank has finished reading the exposed buffers and
	// waits until every rank has, after which buf is the caller's again. On
	// failure (a context, a dead peer) the exposure is withdrawn first: a peer
	// still reading fails instead of keeping bytes the caller may overwrite.
	Unexpose(ctx context.Context) error
}

// ErrNoExpose is Exposed's error when some rank of the group cannot read its
// peers' memory, or declines to; every rank gets it for the same call.
var ErrNoExpose = errors.New("transport: some rank cannot or will not read its peers' memory")

// Namer is implemented by transports that can describe themselves ("inproc",
// "tcp", "nccl") for reports and errors.
type Namer interface {
	Name() string
}

// Sentinel errors; test with errors.Is.
var (
	ErrClosed       = errors.New("transport closed")
	ErrPeerClosed   = errors.New("peer closed the connection")
	ErrTagMismatch  = errors.New("message tag mismatch")
	ErrSizeMismatch = errors.New("message size mismatch")
	ErrInvalidPeer  = errors.New("invalid peer")
	ErrCorrupt      = errors.New("corrupt frame")
)

// TagError is the error of a Recv whose message carried another tag. It
// matches ErrTagMismatch with errors.Is; Got lets the layer above say what
// the peer was doing.
type TagError struct {
	Got, Want Tag
}

func (e *TagError) Error() string {
	return fmt.Sprintf("%v: got %v, want %v", ErrTagMismatch, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrTagMismatch) hold.
func (e *TagError) Is(target error) bool { return target == ErrTagMismatch }

// Error carries the operation, this rank and the peer of a failed call.
type Error struct {
	Op   string // "send", "recv", "dial", …
	Rank int
	Peer int
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("transport: %s rank %d peer %d: %v", e.Op, e.Rank, e.Peer, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// CheckPeer returns an *Error wrapping ErrInvalidPeer when peer is not a valid
// peer of rank in a group of size (a rank never sends to itself).
func CheckPeer(op string, rank, size, peer int) error {
	if peer < 0 || peer >= size || peer == rank {
		return &Error{Op: op, Rank: rank, Peer: peer, Err: fmt.Errorf("%w: %d (group of %d)", ErrInvalidPeer, peer, size)}
	}
	return nil
}

// SubRank checks the member list of a Splitter.Sub call made by rank of a
// group of size: every member a distinct rank of the group, rank among them.
// It returns rank's index in ranks (its sub-rank), or an error wrapping
// ErrInvalidPeer.
func SubRank(rank, size int, ranks []int) (int, error) {
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= size || seen[r] {
			return -1, fmt.Errorf("%w: sub-group ranks %v (group of %d)", ErrInvalidPeer, ranks, size)
		}
		seen[r] = true
		if r == rank {
			me = i
		}
	}
	if me < 0 {
		return -1, fmt.Errorf("%w: rank %d is not in sub-group %v", ErrInvalidPeer, rank, ranks)
	}
	return me, nil
}
