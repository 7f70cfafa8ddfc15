//go:build cgo

package dl

import (
	"errors"
	"testing"
)

func TestOpenLibc(t *testing.T) {
	l, err := Open("", "libdetcoll-nope.so", "libc.so.6")
	if err != nil {
		t.Fatalf("open libc: %v", err)
	}
	if l.Name() != "libc.so.6" || l.Path() == "" {
		t.Fatalf("name %q path %q", l.Name(), l.Path())
	}
	if _, err := l.Sym("strlen"); err != nil {
		t.Fatalf("strlen: %v", err)
	}
	p, which, err := l.SymAny("detcoll_no_such_symbol", "strlen")
	if err != nil || which != "strlen" || p == 0 {
		t.Fatalf("SymAny = %v %q %v", p, which, err)
	}
	if _, err := l.Sym("detcoll_no_such_symbol"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing symbol error = %v", err)
	}
	if _, _, err := l.SymAny("x1", "x2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SymAny missing = %v", err)
	}
}
