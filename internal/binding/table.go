package binding

import (
	"fmt"
	"sync"

	"github.com/detcoll/detcoll/internal/dl"
)

// Symbol is one entry point of a library.
type Symbol struct {
	API        string   // the name in the vendor's documentation
	Candidates []string // exported names to try, best first
	Optional   bool     // the binding works without it
	Role       string   // the internal/binding/gpurt call it plays ("StreamCreate"), if any
}

// Table is a library's symbols, indexed by the binding's sym type S and, once Open succeeded, their addresses.
// Open is called once (under the binding's sync.Once); the other methods
// only read and are safe for concurrent use after it.
type Table[S ~int] struct {
	Symbols  []Symbol
	ptrs     []uintptr
	resolved []string
	lib      *dl.Library

	once    sync.Once
	loadErr error
}

// NewTable is a table of syms (indexed by S), not yet opened.
func NewTable[S ~int](syms []Symbol) *Table[S] {
	return &Table[S]{Symbols: syms, ptrs: make([]uintptr, len(syms)), resolved: make([]string, len(syms))}
}

// Load runs load (the binding's: Open and whatever else it needs) the first
// time it is called and returns that outcome on every call, for the life of
// the process.
func (t *Table[S]) Load(load func() error) error {
	t.once.Do(func() { t.loadErr = load() })
	return t.loadErr
}

// LoadedPath is Path after a successful init, "" when init fails.
func (t *Table[S]) LoadedPath(init func() error) string {
	if init() != nil {
		return ""
	}
	return t.Path()
}

// LoadError is why Open failed: Call is "dlopen" (no candidate library
// could be opened) or "dlsym" (a required symbol is missing). Each binding
// turns it into its own *Error with its "unavailable" code.
type LoadError struct {
	Call    string
	Message string
}

func (e *LoadError) Error() string { return e.Call + ": " + e.Message }

// Open opens the library ($env alone when set, else names in order) and
// resolves every symbol.
func (t *Table[S]) Open(env string, names ...string) error {
	l, err := dl.Open(env, names...)
	if err != nil {
		return &LoadError{Call: "dlopen", Message: err.Error()}
	}
	for i := range t.Symbols {
		s := &t.Symbols[i]
		p, name, err := l.SymAny(s.Candidates...)
		if err != nil {
			if s.Optional {
				continue
			}
			return &LoadError{Call: "dlsym", Message: fmt.Sprintf("%s lacks %s: %v", l.Path(), s.API, err)}
		}
		t.ptrs[i] = uintptr(p)
		t.resolved[i] = name
	}
	t.lib = l
	return nil
}

// Ptr is the address of symbol s (0 when not resolved, or t is nil).
func (t *Table[S]) Ptr(s S) uintptr {
	if t == nil {
		return 0
	}
	return t.ptrs[s]
}

// Have reports whether symbol s was resolved (false for a nil t: a
// binding's zero-value handle has no library).
func (t *Table[S]) Have(s S) bool { return t.Ptr(s) != 0 }

// Resolved is the exported name bound for symbol s: the one resolved, else
// the preferred candidate.
func (t *Table[S]) Resolved(s S) string {
	if t.resolved[s] != "" {
		return t.resolved[s]
	}
	return t.Symbols[s].Candidates[0]
}

// API is the documented name of symbol s.
func (t *Table[S]) API(s S) string { return t.Symbols[s].API }

// SymbolName is the exported name bound for the symbol documented as api
// (see Resolved), or "" for a name the table does not list.
func (t *Table[S]) SymbolName(api string) string {
	if s, ok := t.Lookup(api); ok {
		return t.Resolved(s)
	}
	return ""
}

// Lookup is the index of the symbol documented as api.
func (t *Table[S]) Lookup(api string) (S, bool) {
	for i := range t.Symbols {
		if t.Symbols[i].API == api {
			return S(i), true
		}
	}
	return 0, false
}

// Name is the candidate that opened ("" before a successful Open).
func (t *Table[S]) Name() string {
	if t.lib == nil {
		return ""
	}
	return t.lib.Name()
}

// Path is the file of the opened library ("" before a successful Open).
func (t *Table[S]) Path() string {
	if t.lib == nil {
		return ""
	}
	return t.lib.Path()
}

// Call is the bindings' prologue around one call of entry point s: init
// (load the library, and whatever else the binding needs first), then an
// optional symbol the library does not export is notFound through errorOf
// (never a call through a nil pointer), else f's result through errorOf.
func Call[S ~int, R Code](t *Table[S], init func() error, errorOf func(S, R) error, notFound R, s S, f func() R) error {
	if err := init(); err != nil {
		return err
	}
	if !t.Have(s) {
		return errorOf(s, notFound)
	}
	return errorOf(s, f())
}
