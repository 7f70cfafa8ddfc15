//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package tcp

type inlineWrite struct{}

// tryWritev takes nothing here: Exchange then writes every frame with the
// blocking path in a goroutine, as Send does.
func (d *direction) tryWritev(a, b []byte) (int, error) { return 0, nil }
