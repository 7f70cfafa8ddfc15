package parallel

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// Mesh is one rank's view of a TP × CP × DP process mesh over a world
// communicator. Sequence parallelism (SP) rides on the TP group.
//
// Rank layout, TP fastest:
//
//	world rank = t + TP*(c + CP*d)     t = TP rank, c = CP rank, d = DP rank
//
// so a TP group is TP consecutive world ranks (one node, in practice), a CP
// group has stride TP, and a DP group stride TP*CP. Every group orders its
// members by their coordinate along it, so group rank = coordinate.
type Mesh struct {
	world              *detcoll.Comm
	tpC, cpC, dpC, mpC *detcoll.Comm
	tp, cp, dp         int
	t, c, d            int
}

// NewMesh builds the mesh with Split. It is collective over world: every
// rank calls it with the same (tp, cp, dp). The triples are all-gathered
// first, so when tp*cp*dp != W or the ranks disagree, every rank returns an
// error (ErrInvalidArgument or ErrMismatch) and world stays usable.
func NewMesh(ctx context.Context, world *detcoll.Comm, tp, cp, dp int) (*Mesh, error) {
	if world == nil {
		return nil, fmt.Errorf("%w: NewMesh: nil communicator", ErrInvalidArgument)
	}
	w, rank := world.Size(), world.Rank()
	mine := make([]byte, 24)
	binary.LittleEndian.PutUint64(mine[0:], uint64(int64(tp)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(cp)))
	binary.LittleEndian.PutUint64(mine[16:], uint64(int64(dp)))
	all := make([]byte, 24*w)
	if err := world.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return nil, fmt.Errorf("parallel: NewMesh: exchanging mesh shapes: %w", err)
	}
	triple := func(p int) [3]int64 {
		b := all[24*p:]
		return [3]int64{int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:])), int64(binary.LittleEndian.Uint64(b[16:]))}
	}
	differ := false
	for p := 0; p < w; p++ {
		if triple(p) != triple(rank) {
			differ = true
		}
	}
	if differ {
		var sb strings.Builder
		for p := 0; p < w; p++ {
			t := triple(p)
			fmt.Fprintf(&sb, " [rank %d: tp=%d cp=%d dp=%d]", p, t[0], t[1], t[2])
		}
		return nil, fmt.Errorf("%w: NewMesh on rank %d: the ranks asked for different meshes:%s", ErrMismatch, rank, sb.String())
	}
	if tp < 1 || cp < 1 || dp < 1 || tp*cp*dp != w {
		return nil, fmt.Errorf("%w: NewMesh on rank %d: tp=%d × cp=%d × dp=%d must equal the world size %d (each at least 1)", ErrInvalidArgument, rank, tp, cp, dp, w)
	}
	m := &Mesh{world: world, tp: tp, cp: cp, dp: dp, t: rank % tp, c: rank / tp % cp, d: rank / (tp * cp)}
	var err error
	split := func(color, key int) *detcoll.Comm {
		if err != nil {
			return nil
		}
		var s *detcoll.Comm
		s, err = world.Split(ctx, color, key)
		return s
	}
	m.tpC = split(m.c+cp*m.d, m.t)
	m.cpC = split(m.t+tp*m.d, m.c)
	m.dpC = split(m.t+tp*m.c, m.d)
	m.mpC = split(m.d, m.t+tp*m.c)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("parallel: NewMesh: %w", err)
	}
	return m, nil
}

// World is the communicator the mesh was built over.
func (m *Mesh) World() *detcoll.Comm { return m.world }

// TP is this rank's tensor-parallel group (also the sequence-parallel group).
func (m *Mesh) TP() *detcoll.Comm { return m.tpC }

// SP is the sequence-parallel group: the TP group.
func (m *Mesh) SP() *detcoll.Comm { return m.tpC }

// CP is this rank's context-parallel group.
func (m *Mesh) CP() *detcoll.Comm { return m.cpC }

// DP is this rank's data-parallel group (for gradient synchronisation).
func (m *Mesh) DP() *detcoll.Comm { return m.dpC }

// Model is the TP × CP group of this rank's data-parallel replica (the
// ranks that hold one copy of the model), ordered like the world (TP
// fastest). The layers validate their arguments over it.
func (m *Mesh) Model() *detcoll.Comm { return m.mpC }

// Sizes returns (TP, CP, DP).
func (m *Mesh) Sizes() (tp, cp, dp int) { return m.tp, m.cp, m.dp }

// Coords returns this rank's (TP, CP, DP) coordinates.
func (m *Mesh) Coords() (t, c, d int) { return m.t, m.c, m.d }

// WorldRank is the world rank of coordinates (t, c, d).
func (m *Mesh) WorldRank(t, c, d int) int { return t + m.tp*(c+m.cp*d) }

func (m *Mesh) String() string {
	return fmt.Sprintf("mesh tp%d_cp%d_dp%d rank %d (t=%d c=%d d=%d)", m.tp, m.cp, m.dp, m.world.Rank(), m.t, m.c, m.d)
}

// Close closes the mesh's sub-communicators (not World). Closing World
// closes them too.
func (m *Mesh) Close() error {
	for _, c := range []*detcoll.Comm{m.tpC, m.cpC, m.dpC, m.mpC} {
		if c != nil {
			c.Close()
		}
	}
	return nil
}
