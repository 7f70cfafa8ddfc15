package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/token"
	"strconv"
	"strings"

	"github.com/detcoll/detcoll/internal/binding/gpurt"
)

// Spec is one library's list: what symbols.txt declares.
type Spec struct {
	Package  string
	Library  string // what the table is, for the generated comment ("the CUDA driver")
	Funcs    []Func
	PerLoad  bool   // one table per load (newSyms) rather than the package's syms
	Result   string // Go type of the result codes ("" when the list has none)
	NamesVar string // the generated map's name (default resultNames)
	Fallback string // name format for unlisted codes, one %d
	Codes    []Code
	Messages []Code   // built-in descriptions (cuBLAS: the library has no string for old versions)
	ABI      []string // gpurt.ABI fields set by abi lines (IntegerDevicePtr, HostAllocFlags)
}

// abiFields are the abi directive's words and the gpurt.ABI field each sets.
var abiFields = map[string]string{"integer-device-ptr": "IntegerDevicePtr", "host-alloc-flags": "HostAllocFlags"}

// Func is one entry point: its documented name (also the Go constant that
// indexes it), the exported candidates best first, and whether the binding
// works without it.
type Func struct {
	API        string
	Candidates []string
	Optional   bool
	Role       string // the internal/binding/gpurt role it plays, if any
	Line       int
}

// Code is one result code and its name (or message).
type Code struct {
	Value int32
	Text  string
	Line  int
}

// Parse reads a symbols.txt. Each line is a directive and its fields;
// '#' starts a comment. Directives:
//
//	package NAME                 the Go package
//	library WORDS…               what the table is (for the comment)
//	fn API [optional] [role=R] [CAND…]  an entry point; no CAND means API itself;
//	                             role=R: it is gpurt.OpR for the shared handle types
//	abi WORD…                    how the memory calls' C signatures differ from the shared
//	                             default (gpurt.ABI): integer-device-ptr, host-alloc-flags
//	table per-load               generate newSyms(), a fresh table per load, not var syms
//	result TYPE VAR FALLBACK     the result type, the map's name, the format of unlisted codes
//	code N NAME                  a result code's name
//	message N WORDS…             a result code's built-in description
func Parse(file string, src []byte) (*Spec, error) {
	// Long on purpose: one switch over the spec's directives, a case each, then the final checks.
	s := &Spec{NamesVar: "resultNames"}
	seen := map[string]int{}
	codes := map[int32]int{}
	roles := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", file, n, fmt.Sprintf(format, args...))
		}
		switch d, args := f[0], f[1:]; d {
		case "package":
			if len(args) != 1 || !token.IsIdentifier(args[0]) {
				return nil, bad("package wants one identifier")
			}
			s.Package = args[0]
		case "library":
			if len(args) == 0 {
				return nil, bad("library wants a description")
			}
			s.Library = strings.Join(args, " ")
		case "fn":
			if len(args) == 0 || !token.IsIdentifier(args[0]) || token.IsExported(args[0]) {
				return nil, bad("fn wants an unexported identifier (the documented API name)")
			}
			fn := Func{API: args[0], Line: n}
			rest := args[1:]
			if len(rest) > 0 && rest[0] == "optional" {
				fn.Optional, rest = true, rest[1:]
			}
			if len(rest) > 0 && strings.HasPrefix(rest[0], "role=") {
				fn.Role, rest = strings.TrimPrefix(rest[0], "role="), rest[1:]
				if _, ok := gpurt.OpNamed(fn.Role); !ok {
					return nil, bad("unknown role %q", fn.Role)
				}
				if prev, ok := roles[fn.Role]; ok {
					return nil, bad("role %s already played by line %d", fn.Role, prev)
				}
				roles[fn.Role] = n
			}
			for _, c := range rest {
				if !token.IsIdentifier(c) {
					return nil, bad("candidate %q is not a C identifier", c)
				}
			}
			if len(rest) == 0 {
				rest = []string{fn.API}
			}
			fn.Candidates = rest
			if prev, ok := seen[fn.API]; ok {
				return nil, bad("%s already declared on line %d", fn.API, prev)
			}
			seen[fn.API] = n
			s.Funcs = append(s.Funcs, fn)
		case "abi":
			if len(args) == 0 {
				return nil, bad("abi wants integer-device-ptr or host-alloc-flags")
			}
			for _, w := range args {
				field, ok := abiFields[w]
				if !ok {
					return nil, bad("unknown abi word %q", w)
				}
				s.ABI = append(s.ABI, field)
			}
		case "table":
			if len(args) != 1 || args[0] != "per-load" {
				return nil, bad("table wants per-load")
			}
			s.PerLoad = true
		case "result":
			if len(args) != 3 || !token.IsIdentifier(args[0]) || !token.IsIdentifier(args[1]) {
				return nil, bad("result wants TYPE VAR FALLBACK")
			}
			if strings.Count(args[2], "%d") != 1 || strings.Count(args[2], "%") != 1 {
				return nil, bad("fallback %q wants exactly one %%d", args[2])
			}
			s.Result, s.NamesVar, s.Fallback = args[0], args[1], args[2]
		case "code", "message":
			if len(args) < 2 {
				return nil, bad("%s wants a number and a text", d)
			}
			v, err := strconv.ParseInt(args[0], 10, 32)
			if err != nil {
				return nil, bad("%s: %v", d, err)
			}
			c := Code{Value: int32(v), Text: strings.Join(args[1:], " "), Line: n}
			if d == "message" {
				s.Messages = append(s.Messages, c)
				continue
			}
			if len(args) != 2 {
				return nil, bad("code wants a number and one name")
			}
			if prev, ok := codes[c.Value]; ok {
				return nil, bad("code %d already named on line %d", c.Value, prev)
			}
			codes[c.Value] = n
			s.Codes = append(s.Codes, c)
		default:
			return nil, bad("unknown directive %q", d)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(roles) > 0 {
		for o := gpurt.Op(0); o < gpurt.NumOps; o++ {
			if _, ok := roles[o.String()]; !ok {
				return nil, fmt.Errorf("%s: no fn plays role %s (a list with roles needs all of them)", file, o)
			}
		}
	}
	switch {
	case len(s.ABI) > 0 && len(roles) == 0:
		return nil, fmt.Errorf("%s: abi lines without roles (the ABI is of gpurt's shared calls)", file)
	case s.Package == "":
		return nil, fmt.Errorf("%s: no package line", file)
	case len(s.Funcs) == 0:
		return nil, fmt.Errorf("%s: no fn lines", file)
	case (len(s.Codes) > 0 || len(s.Messages) > 0) && s.Result == "":
		return nil, fmt.Errorf("%s: code or message lines without a result line", file)
	}
	return s, nil
}
