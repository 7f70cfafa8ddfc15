package transport

import (
	"errors"
	"testing"
)

func TestSubRank(t *testing.T) {
	if me, err := SubRank(2, 4, []int{3, 2, 0}); err != nil || me != 1 {
		t.Fatalf("SubRank(2, 4, [3 2 0]) = %d, %v; want 1", me, err)
	}
	for _, ranks := range [][]int{{0, 1}, {2, 2}, {2, 4}, {-1, 2}, nil} {
		if me, err := SubRank(2, 4, ranks); !errors.Is(err, ErrInvalidPeer) || me != -1 {
			t.Errorf("SubRank(2, 4, %v) = %d, %v; want ErrInvalidPeer", ranks, me, err)
		}
	}
}
