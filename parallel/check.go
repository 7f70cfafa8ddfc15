package parallel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// Sentinel errors; test with errors.Is. ErrInvalidArgument and ErrMismatch
// wrap detcoll's sentinels of the same name, so errors.Is(err,
// detcoll.ErrMismatch) also holds.
var (
	// ErrInvalidArgument: a rank's arguments are unusable (shape, dtype,
	// divisibility). Every rank of the group gets an error wrapping it.
	ErrInvalidArgument = fmt.Errorf("parallel: %w", detcoll.ErrInvalidArgument)
	// ErrMismatch: the ranks of a group passed arguments that disagree
	// (shapes, configuration, mesh). Every rank gets an error wrapping it.
	ErrMismatch = fmt.Errorf("parallel: %w", detcoll.ErrMismatch)
	// ErrNoGPUBackend: a GPU backend was asked for and none is registered.
	ErrNoGPUBackend = errors.New("parallel: needs a GPU backend")
)

// field is one named integer of a shape descriptor.
type field struct {
	name string
	val  int64
}

// opcodes identify the operation a rank is in when shapes are compared, so
// that a rank in another layer call is reported as such.
var opNames = []string{"?", "NewFFN", "NewAttention", "FFN.Forward", "FFN.Backward", "Attention.Forward", "Attention.Backward"}

const (
	opNewFFN int64 = iota + 1
	opNewAttention
	opFFNForward
	opFFNBackward
	opAttnForward
	opAttnBackward
)

// maxFields is the fixed descriptor length: every call exchanges the same
// number of bytes, so the exchange itself never mismatches.
const maxFields = 16

// agree all-gathers every rank's descriptor (opcode, a flag for locally
// rejected arguments, its world rank, fields) over c and returns an error on
// every rank when any rank rejected its arguments or the descriptors
// differ. local is this rank's own argument error (or nil): the rank still
// takes part so that its peers fail instead of waiting. worldRank (or -1 when
// unknown) is only for messages; hint is appended to a mismatch message.
// The exchange is one small AllGather; nothing is poisoned when arguments
// are rejected or disagree.
func agree(ctx context.Context, c *detcoll.Comm, opc int64, worldRank int, fields []field, local error, hint string) error {
	op := opNames[opc]
	if len(fields) > maxFields {
		panic("parallel: descriptor too long")
	}
	const slot = 8
	n := (3 + maxFields) * slot
	mine := make([]byte, n)
	put := func(b []byte, i int, v int64) { binary.LittleEndian.PutUint64(b[i*slot:], uint64(v)) }
	get := func(b []byte, i int) int64 { return int64(binary.LittleEndian.Uint64(b[i*slot:])) }
	put(mine, 0, opc)
	if local != nil {
		put(mine, 1, 1)
	}
	put(mine, 2, int64(worldRank))
	for i, f := range fields {
		put(mine, 3+i, f.val)
	}
	all := make([]byte, c.Size()*n)
	if err := c.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return fmt.Errorf("parallel: %s: exchanging shapes: %w", op, err)
	}
	if local != nil {
		return local
	}
	peer := func(p int) []byte { return all[p*n : (p+1)*n] }
	who := func(p int) string {
		if w := get(peer(p), 2); w >= 0 {
			return fmt.Sprintf("group rank %d (world rank %d)", p, w)
		}
		return fmt.Sprintf("group rank %d", p)
	}
	var bad []string
	for p := 0; p < c.Size(); p++ {
		b := peer(p)
		if get(b, 0) != opc {
			name := "?"
			if o := get(b, 0); o > 0 && int(o) < len(opNames) {
				name = opNames[o]
			}
			return fmt.Errorf("%w: %s: %s is in %s", ErrMismatch, op, who(p), name)
		}
		if get(b, 1) != 0 {
			bad = append(bad, who(p))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: %s: %s rejected its arguments (its own error says why)", ErrInvalidArgument, op, strings.Join(bad, ", "))
	}
	differ := false
	for p := 0; p < c.Size() && !differ; p++ {
		for i := range fields {
			if get(peer(p), 3+i) != fields[i].val {
				differ = true
			}
		}
	}
	if !differ {
		return nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: the ranks of the group disagree:", op)
	for p := 0; p < c.Size(); p++ {
		fmt.Fprintf(&sb, " [%s:", who(p))
		for i, f := range fields {
			fmt.Fprintf(&sb, " %s=%d", f.name, get(peer(p), 3+i))
		}
		sb.WriteString("]")
	}
	if hint != "" {
		sb.WriteString("; " + hint)
	}
	return fmt.Errorf("%w: %s", ErrMismatch, sb.String())
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// argErr formats a local argument error of op on this rank (world rank,
// or -1 when unknown).
func argErr(op string, rank int, format string, args ...any) error {
	if rank < 0 {
		return fmt.Errorf("%w: %s: %s", ErrInvalidArgument, op, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%w: %s on world rank %d: %s", ErrInvalidArgument, op, rank, fmt.Sprintf(format, args...))
}
