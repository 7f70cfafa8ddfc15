package detcoll

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/detcoll/detcoll/transport"
)

// block is the payload rank src sends to rank dst in the tests below: n
// bytes that name both.
func block(src, dst, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(src*37 + dst*11 + i)
	}
	return b
}

func TestAllToAllUneven(t *testing.T) {
	for _, w := range []int{1, 2, 3, 4} {
		comms := newComms(t, w)
		size := func(src, dst int) int { return 1 + src + 2*dst } // pairwise lengths differ
		recvs := make([][][]byte, w)
		mustEach(t, comms, func(c *Comm) error {
			r := c.Rank()
			sends := make([][]byte, w)
			recvs[r] = make([][]byte, w)
			for p := 0; p < w; p++ {
				sends[p] = block(r, p, size(r, p))
				recvs[r][p] = make([]byte, size(p, r))
			}
			return c.AllToAll(context.Background(), sends, recvs[r])
		})
		for r := 0; r < w; r++ {
			for p := 0; p < w; p++ {
				if !bytes.Equal(recvs[r][p], block(p, r, size(p, r))) {
					t.Fatalf("W=%d rank %d block from %d: %v", w, r, p, recvs[r][p])
				}
			}
		}
	}
}

func TestAllToAllSizeMismatch(t *testing.T) {
	comms := newComms(t, 2, WithTimeout(5*time.Second))
	errs := each(comms, func(c *Comm) error {
		sends := [][]byte{make([]byte, 4), make([]byte, 4)}
		recvs := [][]byte{make([]byte, 4), make([]byte, 4)}
		if c.Rank() == 1 {
			recvs[0] = make([]byte, 5) // rank 0 sends 4 bytes
		}
		return c.AllToAll(context.Background(), sends, recvs)
	})
	if !errors.Is(errs[1], ErrMismatch) && !errors.Is(errs[1], transport.ErrSizeMismatch) {
		t.Fatalf("rank 1: want a size mismatch, got %v", errs[1])
	}
}

func TestAllToAllBadArgs(t *testing.T) {
	comms := newComms(t, 2)
	err := comms[0].AllToAll(context.Background(), [][]byte{nil}, [][]byte{nil, nil})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("want ErrInvalidArgument, got %v", err)
	}
	buf := make([]byte, 8)
	err = comms[0].AllToAll(context.Background(), [][]byte{buf[:4], buf[4:]}, [][]byte{buf[:4], make([]byte, 4)})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("overlap: want ErrInvalidArgument, got %v", err)
	}
}

func TestGather(t *testing.T) {
	for _, w := range []int{1, 2, 3, 4} {
		for root := 0; root < w; root++ {
			comms := newComms(t, w)
			var got []byte
			mustEach(t, comms, func(c *Comm) error {
				var recv []byte
				if c.Rank() == root {
					recv = make([]byte, 3*w)
					got = recv
				}
				return c.Gather(context.Background(), block(c.Rank(), root, 3), recv, root)
			})
			for p := 0; p < w; p++ {
				if !bytes.Equal(got[3*p:3*p+3], block(p, root, 3)) {
					t.Fatalf("W=%d root %d block %d: %v", w, root, p, got)
				}
			}
		}
	}
}

func TestGatherMismatch(t *testing.T) {
	comms := newComms(t, 3, WithTimeout(5*time.Second))
	errs := each(comms, func(c *Comm) error {
		root := 0
		if c.Rank() == 2 {
			root = 1
		}
		return c.Gather(context.Background(), make([]byte, 4), make([]byte, 12), root)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("rank %d: want ErrMismatch, got %v", r, err)
		}
	}
}

func TestSendRecv(t *testing.T) {
	comms := newComms(t, 3)
	got := make([]byte, 5)
	errs := each(comms, func(c *Comm) error {
		ctx := context.Background()
		switch c.Rank() {
		case 0:
			if err := c.Send(ctx, block(0, 2, 5), 2, 7); err != nil {
				return err
			}
		case 2:
			if err := c.Recv(ctx, got, 0, 7); err != nil {
				return err
			}
		}
		// a collective after the pair still matches on every rank
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if !bytes.Equal(got, block(0, 2, 5)) {
		t.Fatalf("got %v", got)
	}
}

func TestRecvTagMismatch(t *testing.T) {
	comms := newComms(t, 2, WithTimeout(5*time.Second))
	errs := each(comms, func(c *Comm) error {
		if c.Rank() == 0 {
			return c.Send(context.Background(), make([]byte, 4), 1, 1)
		}
		return c.Recv(context.Background(), make([]byte, 4), 0, 2)
	})
	if !errors.Is(errs[1], ErrMismatch) {
		t.Fatalf("rank 1: want ErrMismatch, got %v", errs[1])
	}
	if err := comms[0].Send(context.Background(), nil, 0, 0); !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrPoisoned) {
		t.Fatalf("send to self: %v", err)
	}
}

func TestSendBadPeer(t *testing.T) {
	comms := newComms(t, 2)
	for _, p := range []int{-1, 0, 2} {
		if err := comms[0].Send(context.Background(), nil, p, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("peer %d: want ErrInvalidArgument, got %v", p, err)
		}
	}
	// argument errors leave the Comm usable
	mustEach(t, comms, func(c *Comm) error { return c.Barrier(context.Background()) })
}
