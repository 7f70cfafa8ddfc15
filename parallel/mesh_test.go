package parallel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// members all-gathers the world ranks of a group, in group-rank order.
func members(ctx context.Context, c *detcoll.Comm, worldRank int) ([]int, error) {
	mine := binary.LittleEndian.AppendUint32(nil, uint32(worldRank))
	all := make([]byte, 4*c.Size())
	if err := c.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return nil, err
	}
	out := make([]int, c.Size())
	for i := range out {
		out[i] = int(binary.LittleEndian.Uint32(all[4*i:]))
	}
	return out, nil
}

func TestMeshLayout(t *testing.T) {
	for _, s := range [][3]int{{2, 2, 2}, {2, 3, 1}, {1, 4, 2}, {4, 1, 1}, {1, 1, 1}, {2, 4, 1}} {
		tp, cp, dp := s[0], s[1], s[2]
		t.Run(fmt.Sprintf("tp%d_cp%d_dp%d", tp, cp, dp), func(t *testing.T) {
			comms := newWorld(t, tp*cp*dp)
			mustRanks(t, comms, func(r int, c *detcoll.Comm) error {
				ctx := context.Background()
				m, err := NewMesh(ctx, c, tp, cp, dp)
				if err != nil {
					return err
				}
				tc, cc, dc := m.Coords()
				if r != tc+tp*(cc+cp*dc) || m.WorldRank(tc, cc, dc) != r {
					return fmt.Errorf("coords (%d,%d,%d) for world rank %d", tc, cc, dc, r)
				}
				want := map[string][]int{"tp": nil, "cp": nil, "dp": nil, "model": nil}
				for i := 0; i < tp; i++ {
					want["tp"] = append(want["tp"], m.WorldRank(i, cc, dc))
				}
				for i := 0; i < cp; i++ {
					want["cp"] = append(want["cp"], m.WorldRank(tc, i, dc))
				}
				for i := 0; i < dp; i++ {
					want["dp"] = append(want["dp"], m.WorldRank(tc, cc, i))
				}
				for i := 0; i < tp*cp; i++ {
					want["model"] = append(want["model"], dc*tp*cp+i)
				}
				for _, g := range []struct {
					name string
					c    *detcoll.Comm
					rank int
				}{{"tp", m.TP(), tc}, {"cp", m.CP(), cc}, {"dp", m.DP(), dc}, {"model", m.Model(), tc + tp*cc}} {
					if g.c.Rank() != g.rank {
						return fmt.Errorf("%s rank %d, want %d", g.name, g.c.Rank(), g.rank)
					}
					got, err := members(ctx, g.c, r)
					if err != nil {
						return err
					}
					if fmt.Sprint(got) != fmt.Sprint(want[g.name]) {
						return fmt.Errorf("%s group %v, want %v", g.name, got, want[g.name])
					}
				}
				if m.SP() != m.TP() {
					return fmt.Errorf("SP is not the TP group")
				}
				return nil
			})
		})
	}
}

func TestMeshErrors(t *testing.T) {
	cases := []struct {
		name     string
		w        int
		shape    func(r int) (tp, cp, dp int)
		sentinel error
	}{
		{"product is not W", 4, func(int) (int, int, int) { return 2, 3, 1 }, ErrInvalidArgument},
		{"zero", 4, func(int) (int, int, int) { return 4, 0, 1 }, ErrInvalidArgument},
		{"ranks disagree", 4, func(r int) (int, int, int) {
			if r == 2 {
				return 4, 1, 1
			}
			return 2, 2, 1
		}, ErrMismatch},
		{"ranks disagree, one of them invalid", 8, func(r int) (int, int, int) {
			if r == 7 {
				return 3, 1, 1
			}
			return 2, 2, 2
		}, ErrMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comms := newWorld(t, c.w)
			errs := onRanks(comms, func(r int, cm *detcoll.Comm) error {
				tp, cp, dp := c.shape(r)
				_, err := NewMesh(context.Background(), cm, tp, cp, dp)
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, c.sentinel) {
					t.Errorf("rank %d: %v, want %v", r, err, c.sentinel)
				} else if r == 0 {
					t.Log(err)
				}
			}
			// The world is still usable.
			mustRanks(t, comms, func(r int, cm *detcoll.Comm) error { return cm.Barrier(context.Background()) })
		})
	}
	if _, err := NewMesh(context.Background(), nil, 1, 1, 1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil world: %v", err)
	}
}
