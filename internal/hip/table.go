package hip

import "github.com/detcoll/detcoll/internal/binding"

//go:generate go run ../bindgen

// The symbol table itself (syms, the sym constants) and the result names
// are generated from symbols.txt into symbols_gen.go.

func libraryPath() string       { return syms.Path() }
func haveSym(s sym) bool        { return syms.Have(int(s)) }
func resolvedName(s sym) string { return syms.Resolved(int(s)) }

// lookup is the sym documented as api.
func lookup(api string) (sym, bool) {
	i, ok := syms.Lookup(api)
	return sym(i), ok
}

// loadError is a failed Table.Open as this binding's *Error.
func loadError(err error) error {
	return binding.LoadFailure[Result, vendor](err, ResultName(ResultUnavailable))
}
