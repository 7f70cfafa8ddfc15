package detcoll

import (
	"bytes"
	"testing"
)

// copyCached and copyOut split copies into pieces; every byte must land
// where one copy would put it, on and around the piece boundaries and on
// both sides of cachedOut.
func TestWindowCopies(t *testing.T) {
	sizes := []int{0, 1, 7, cachedPiece - 1, cachedPiece, cachedPiece + 1, 3*cachedPiece + 5}
	for _, n := range sizes {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*31 + i>>8)
		}
		for _, extra := range []int{0, 3} { // dst longer than src: only len(src) bytes move
			dst := bytes.Repeat([]byte{0xAA}, n+extra)
			copyCached(dst, src)
			if !bytes.Equal(dst[:n], src) || bytes.Count(dst[n:], []byte{0xAA}) != extra {
				t.Fatalf("copyCached n=%d extra=%d: wrong bytes", n, extra)
			}
		}
		for _, total := range []int{n, cachedOut + 1} {
			dst := bytes.Repeat([]byte{0x55}, n+2)
			copyOut(total, dst[1:n+1], src)
			if dst[0] != 0x55 || dst[n+1] != 0x55 || !bytes.Equal(dst[1:n+1], src) {
				t.Fatalf("copyOut n=%d total=%d: wrong bytes", n, total)
			}
		}
	}
	// A shorter dst takes a prefix, as copy does.
	src := bytes.Repeat([]byte{1, 2, 3}, cachedPiece)
	dst := make([]byte, cachedPiece+2)
	copyCached(dst, src)
	if !bytes.Equal(dst, src[:len(dst)]) {
		t.Fatal("copyCached into a shorter dst: wrong bytes")
	}
}
