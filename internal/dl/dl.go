// Package dl opens shared libraries at run time and resolves their symbols.
//
// It is the only place in detcoll that calls dlopen: the GPU bindings
// (internal/cuda, internal/nvrtc, internal/nccl) use it so that detcoll
// builds on machines without any GPU software and links no vendor library at
// build time (docs/architecture.md and docs/gpu.md).
//
// # Contract
//
// Open tries an environment override first and then a list of candidate
// names, in order, with dlopen(RTLD_NOW|RTLD_LOCAL). When the environment
// variable is set and non-empty, only that path is tried: a wrong override is
// an error, never silently replaced by another copy of the library.
//
// A *Library is never closed by detcoll (the GPU libraries keep global state
// that outlives any one user); Close exists for tests. Symbol addresses are C
// function pointers, valid for the life of the process; they are only ever
// handed back to C.
//
// Built without cgo (CGO_ENABLED=0) every Open fails with an error wrapping
// ErrUnavailable ("unavailable: built without cgo").
package dl

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrUnavailable is wrapped by every error of a build without cgo.
var ErrUnavailable = errors.New("dl: unavailable: built without cgo")

// ErrNotFound is wrapped by Open's error when no candidate could be opened,
// and by Sym's when a symbol is missing.
var ErrNotFound = errors.New("dl: not found")

// Candidates returns the names Open tries, in order: the value of envVar
// alone when it is set and non-empty, otherwise names.
func Candidates(envVar string, names []string) []string {
	if envVar != "" {
		if v := strings.TrimSpace(os.Getenv(envVar)); v != "" {
			return []string{v}
		}
	}
	return append([]string(nil), names...)
}

// Library is an opened shared library.
type Library struct {
	handle uintptr
	name   string // the candidate that opened
	path   string // the file the loader actually mapped, when known
}

// Name is the candidate name that was opened (e.g. "libcuda.so.1").
func (l *Library) Name() string { return l.name }

// Path is the file the dynamic loader mapped, or Name when unknown.
func (l *Library) Path() string {
	if l.path != "" {
		return l.path
	}
	return l.name
}

// Open opens the first loadable candidate (see Candidates). The error lists
// every candidate tried and the loader's message for each.
func Open(envVar string, names ...string) (*Library, error) {
	cands := Candidates(envVar, names)
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w: no library names given", ErrNotFound)
	}
	var msgs []string
	for _, n := range cands {
		l, err := open(n)
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		msgs = append(msgs, err.Error())
	}
	how := ""
	if len(cands) == 1 && envVar != "" && os.Getenv(envVar) != "" {
		how = " (from $" + envVar + ")"
	}
	return nil, fmt.Errorf("%w: cannot load %s%s: %s", ErrNotFound, strings.Join(cands, ", "), how, strings.Join(msgs, "; "))
}

// Sym resolves one symbol.
func (l *Library) Sym(name string) (Symbol, error) {
	p, err := l.sym(name)
	if err != nil {
		return 0, err
	}
	return p, nil
}

// SymAny resolves the first of names that the library exports and says
// which one it was.
func (l *Library) SymAny(names ...string) (Symbol, string, error) {
	for _, n := range names {
		if p, err := l.sym(n); err == nil {
			return p, n, nil
		}
	}
	return 0, "", fmt.Errorf("%w: none of the symbols %s in %s", ErrNotFound, strings.Join(names, ", "), l.Path())
}

// Close unloads the library (tests only; see the package doc).
func (l *Library) Close() error { return l.close() }

// Symbol is the address of a C function in a loaded library (0: none).
// It is an integer, not a Go pointer: hand it only to C.
type Symbol uintptr
