//go:build !cgo

package dl

import "fmt"

func open(name string) (*Library, error) {
	return nil, fmt.Errorf("%w (cannot load %s)", ErrUnavailable, name)
}

func (l *Library) sym(name string) (Symbol, error) {
	return 0, fmt.Errorf("%w (symbol %s)", ErrUnavailable, name)
}

func (l *Library) close() error { return nil }
