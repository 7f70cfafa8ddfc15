package shm

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/detcoll/detcoll/transport"
)

// Rendezvous is the part of a key-value store (such as store.Store) that
// Connect uses.
type Rendezvous interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

// MaxRanks is the largest group Connect accepts (one ring per ordered pair:
// the segment grows with the square of the group).
const MaxRanks = 256

// Defaults of Options.
const (
	DefaultRingBytes      = 1 << 20
	DefaultDirectBytes    = 64 << 10
	DefaultConnectTimeout = 60 * time.Second
	DefaultWindowBytes    = 1 << 20
	minWindowBytes        = 64 << 10
	minRingBytes          = 64 << 10
	maxSegmentBytes       = 1 << 30
	maxWindowTotal        = 512 << 20
)

// Layout constants Options needs on every platform (Options.withDefaults
// sizes the window): pageSize rounds the segment's parts, and winSlots is
// how many slots a rank's window has.
const (
	pageSize = 4096
	winSlots = 2
)

// Options tune Connect. The zero value is ready to use.
type Options struct {
	// RingBytes is the size of each ring (one per ordered pair of ranks),
	// rounded down to a power of two, at least 64 KiB; zero means
	// $DETCOLL_SHM_RING_BYTES or else DefaultRingBytes, shrunk so that the
	// segment stays within 1 GiB.
	RingBytes int
	// DirectBytes is the smallest message copied straight from the sender's
	// memory when the receiver may read it (process_vm_readv); zero means
	// $DETCOLL_SHM_DIRECT_BYTES or else DefaultDirectBytes, negative never
	// (every byte goes through the ring).
	DirectBytes int
	// ConnectTimeout bounds Connect (and Sub). Zero means 60s.
	ConnectTimeout time.Duration
	// WindowBytes is the size of each of a rank's two window slots (the
	// shared staging that collectives reduce from in place,
	// transport.Sharer), rounded up to whole pages; zero means
	// $DETCOLL_SHM_WINDOW_BYTES or else DefaultWindowBytes
	// (OversubscribedWindowBytes when the group has more ranks than this
	// host has CPUs, shrunk to no less than DefaultWindowBytes so that the
	// segment takes at most half of what /dev/shm has free), shrunk (to no
	// less than 64 KiB) so that the windows stay within 512 MiB; negative
	// means no window (collectives then move messages through the rings).
	WindowBytes int
	// Expose says whether this rank takes part in exposed buffers
	// (transport.Exposer: peers read a buffer with process_vm_readv instead
	// of through the window) in a group that has a CPU for every rank and
	// whose memory this rank can read: ExposeAuto times both at Connect
	// and takes the faster (Transport.Calibration), ExposeAlways and
	// ExposeNever do not time. Empty means $DETCOLL_SHM_EXPOSE or else
	// ExposeAuto; any other value fails Connect.
	Expose ExposeMode

	// winFit: WindowBytes is the oversubscribed default, which rank 0
	// fits to /dev/shm's free space when it creates the segment.
	winFit bool
}

// OversubscribedWindowBytes is the window slot where a group has more
// ranks than the host has CPUs. A message larger than a slot moves as
// pieces, and each piece is a publication every rank must reach; with
// ranks waiting for the CPU that costs scheduling rounds per piece. At
// W = 4 on 2 cores, 8 MiB slots against 1 MiB took AllGathers of 16 and
// 64 MiB per rank from 19.6 to 13.9 ms and from 84.9 to 72.0 ms (vader 26.2
// and 79.5), and AllReduces and ReduceScatters of 16 and 64 MiB to
// 0.85–0.94× (docs/shm.md, "Larger window slots when oversubscribed").
const OversubscribedWindowBytes = 8 << 20

// Environment overrides of the zero Options fields (for tuning and benchmarks).
const (
	EnvRingBytes   = "DETCOLL_SHM_RING_BYTES"
	EnvDirectBytes = "DETCOLL_SHM_DIRECT_BYTES"
	EnvWindowBytes = "DETCOLL_SHM_WINDOW_BYTES"
	EnvExpose      = "DETCOLL_SHM_EXPOSE"
)

// ExposeMode is Options.Expose.
type ExposeMode string

// The values of Options.Expose and $DETCOLL_SHM_EXPOSE.
const (
	ExposeAuto   ExposeMode = "auto"
	ExposeAlways ExposeMode = "always"
	ExposeNever  ExposeMode = "never"
)

// checkExpose reports a value of Options.Expose that is none of the modes.
func (o Options) checkExpose() error {
	switch o.Expose {
	case ExposeAuto, ExposeAlways, ExposeNever:
		return nil
	}
	return fmt.Errorf("shm: Options.Expose (or %s) %q: want %s, %s or %s", EnvExpose, string(o.Expose), ExposeAuto, ExposeAlways, ExposeNever)
}

// EnvNodeCPUs names the number of CPUs that this node's ranks share, set by
// a launcher that binds each rank to some of them (detcoll launch
// --bind-to): a bound rank's runtime.NumCPU() counts only its own CPUs, but
// whether ranks may spin, and how large the window slots are, depends on
// whether the group fits the CPUs they share. Unset: runtime.NumCPU().
const EnvNodeCPUs = "DETCOLL_NODE_CPUS"

// nodeCPUs is $DETCOLL_NODE_CPUS, or runtime.NumCPU() when it is unset; an
// error when it is set to anything but a positive whole number.
func nodeCPUs() (int, error) {
	v, ok := os.LookupEnv(EnvNodeCPUs)
	if !ok {
		return runtime.NumCPU(), nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("shm: %s=%q: want a whole number of CPUs ≥ 1", EnvNodeCPUs, v)
	}
	return n, nil
}

func envInt(name string) int {
	v, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name)))
	if err != nil {
		return 0
	}
	return v
}

// withDefaults resolves the zero fields for a group of size ranks on a
// host with cpus CPUs.
func (o Options) withDefaults(size, cpus int) Options {
	if o.RingBytes == 0 {
		o.RingBytes = envInt(EnvRingBytes)
	}
	if o.DirectBytes == 0 {
		o.DirectBytes = envInt(EnvDirectBytes)
	}
	if o.RingBytes == 0 {
		o.RingBytes = DefaultRingBytes
		for pairs := max(size*(size-1), 1); o.RingBytes > minRingBytes && pairs*o.RingBytes > maxSegmentBytes; {
			o.RingBytes /= 2
		}
	}
	o.RingBytes = max(o.RingBytes, minRingBytes)
	o.RingBytes = 1 << (bits.Len(uint(o.RingBytes)) - 1)
	if o.DirectBytes == 0 {
		o.DirectBytes = DefaultDirectBytes
	}
	if o.WindowBytes == 0 {
		o.WindowBytes = envInt(EnvWindowBytes)
	}
	if o.Expose == "" {
		o.Expose = ExposeMode(strings.TrimSpace(os.Getenv(EnvExpose)))
	}
	if o.Expose == "" {
		o.Expose = ExposeAuto
	}
	switch {
	case o.WindowBytes < 0:
		o.WindowBytes = 0
	case o.WindowBytes == 0:
		o.WindowBytes = DefaultWindowBytes
		if size > cpus {
			o.WindowBytes, o.winFit = OversubscribedWindowBytes, true
		}
		for o.WindowBytes > minWindowBytes && size*winSlots*o.WindowBytes > maxWindowTotal {
			o.WindowBytes /= 2
		}
	}
	o.WindowBytes = (o.WindowBytes + pageSize - 1) / pageSize * pageSize
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	return o
}

var (
	// ErrUnavailable: shared memory cannot connect this group (not Linux,
	// no /dev/shm, a rank could not create or map the segment). Every rank
	// of the group gets it together, so all may fall back to another
	// transport.
	ErrUnavailable = errors.New("shm: shared memory transport unavailable")
	// ErrBroken: a message was abandoned half way (a context expired or a
	// rank closed in the middle of it); the pair's stream cannot be used.
	ErrBroken = fmt.Errorf("%w: shm stream broken by an abandoned message", transport.ErrCorrupt)
	// ErrPeerDead: the peer's process exited (or is a zombie) without
	// closing. It matches transport.ErrPeerClosed.
	ErrPeerDead = fmt.Errorf("%w: peer process exited", transport.ErrPeerClosed)
)
