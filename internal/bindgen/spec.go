package main

import (
	"bufio"
	"bytes"
	"errors"
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
	Vendor   string   // the message prefix of the binding's errors ("" generates no vendor type)
	// ErrorKind (Error or LogError) and NameFunc: generate Error and the code
	// → name function; Compiler: the version and error-string entry points of
	// an internal/binding/rtc compiler binding (generate lib and errorOf).
	ErrorKind, NameFunc string
	Compiler            []string
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
	Go    string // the Go constant of the code, when the list declares one
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
//	vendor NAME                  generate the vendor type: errors start "NAME: ", load
//	                             failures wrap the package's ErrUnavailable
//	result TYPE VAR FALLBACK     the result type, the map's name, the format of unlisted codes
//	code N NAME [GO]             a result code's name, and the Go constant (of TYPE) to declare
//	message N WORDS…             a result code's built-in description
//	errors KIND FUNC             generate Error (internal/binding's KIND: Error or LogError,
//	                             of TYPE and vendor) and FUNC, the code → name function
//	compiler VERSION ERRSTRING   generate lib, the internal/binding/rtc.Library of a compiler
//	                             binding (its version and error-string entry points), and errorOf
func Parse(file string, src []byte) (*Spec, error) {
	p := &parser{s: &Spec{NamesVar: "resultNames"}, seen: map[string]int{}, codes: map[int32]int{}, roles: map[string]int{}}
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
		parse, ok := directives[f[0]]
		if !ok {
			return nil, fmt.Errorf("%s:%d: unknown directive %q", file, n, f[0])
		}
		if err := parse(p, f[0], f[1:], n); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := p.finish(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p.s, nil
}

// parser is Parse's state: the spec so far and what each name was declared by.
type parser struct {
	s     *Spec
	seen  map[string]int // fn API → line
	codes map[int32]int  // code value → line
	roles map[string]int // role → line
}

// directives parse one line each (d: the directive, args: its fields, n: the line).
var directives = map[string]func(p *parser, d string, args []string, n int) error{
	"package": func(p *parser, _ string, args []string, _ int) error {
		return oneIdent(args, "package wants one identifier", &p.s.Package)
	},
	"library": func(p *parser, _ string, args []string, _ int) error {
		if len(args) == 0 {
			return errors.New("library wants a description")
		}
		p.s.Library = strings.Join(args, " ")
		return nil
	},
	"fn":  (*parser).fn,
	"abi": (*parser).abi,
	"table": func(p *parser, _ string, args []string, _ int) error {
		if len(args) != 1 || args[0] != "per-load" {
			return errors.New("table wants per-load")
		}
		p.s.PerLoad = true
		return nil
	},
	"vendor": func(p *parser, _ string, args []string, _ int) error {
		return oneIdent(args, "vendor wants one identifier", &p.s.Vendor)
	},
	"result":  (*parser).result,
	"code":    (*parser).code,
	"message": (*parser).code,
	"errors": func(p *parser, _ string, args []string, _ int) error {
		if len(args) != 2 || (args[0] != "Error" && args[0] != "LogError") || !token.IsIdentifier(args[1]) {
			return errors.New("errors wants Error or LogError and the name function's identifier")
		}
		p.s.ErrorKind, p.s.NameFunc = args[0], args[1]
		return nil
	},
	"compiler": func(p *parser, _ string, args []string, _ int) error {
		if len(args) != 2 || !token.IsIdentifier(args[0]) || !token.IsIdentifier(args[1]) {
			return errors.New("compiler wants the version and error-string entry points")
		}
		p.s.Compiler = args
		return nil
	},
}

func oneIdent(args []string, msg string, to *string) error {
	if len(args) != 1 || !token.IsIdentifier(args[0]) {
		return errors.New(msg)
	}
	*to = args[0]
	return nil
}

func (p *parser) fn(_ string, args []string, n int) error {
	if len(args) == 0 || !token.IsIdentifier(args[0]) || token.IsExported(args[0]) {
		return errors.New("fn wants an unexported identifier (the documented API name)")
	}
	fn := Func{API: args[0], Line: n}
	rest := args[1:]
	if len(rest) > 0 && rest[0] == "optional" {
		fn.Optional, rest = true, rest[1:]
	}
	if len(rest) > 0 && strings.HasPrefix(rest[0], "role=") {
		fn.Role, rest = strings.TrimPrefix(rest[0], "role="), rest[1:]
		if _, ok := gpurt.OpNamed(fn.Role); !ok {
			return fmt.Errorf("unknown role %q", fn.Role)
		}
		if prev, ok := p.roles[fn.Role]; ok {
			return fmt.Errorf("role %s already played by line %d", fn.Role, prev)
		}
		p.roles[fn.Role] = n
	}
	for _, c := range rest {
		if !token.IsIdentifier(c) {
			return fmt.Errorf("candidate %q is not a C identifier", c)
		}
	}
	if len(rest) == 0 {
		rest = []string{fn.API}
	}
	fn.Candidates = rest
	if prev, ok := p.seen[fn.API]; ok {
		return fmt.Errorf("%s already declared on line %d", fn.API, prev)
	}
	p.seen[fn.API] = n
	p.s.Funcs = append(p.s.Funcs, fn)
	return nil
}

func (p *parser) abi(_ string, args []string, _ int) error {
	if len(args) == 0 {
		return errors.New("abi wants integer-device-ptr or host-alloc-flags")
	}
	for _, w := range args {
		field, ok := abiFields[w]
		if !ok {
			return fmt.Errorf("unknown abi word %q", w)
		}
		p.s.ABI = append(p.s.ABI, field)
	}
	return nil
}

func (p *parser) result(_ string, args []string, _ int) error {
	if len(args) != 3 || !token.IsIdentifier(args[0]) || !token.IsIdentifier(args[1]) {
		return errors.New("result wants TYPE VAR FALLBACK")
	}
	if strings.Count(args[2], "%d") != 1 || strings.Count(args[2], "%") != 1 {
		return fmt.Errorf("fallback %q wants exactly one %%d", args[2])
	}
	p.s.Result, p.s.NamesVar, p.s.Fallback = args[0], args[1], args[2]
	return nil
}

// code parses code and message lines.
func (p *parser) code(d string, args []string, n int) error {
	if len(args) < 2 {
		return fmt.Errorf("%s wants a number and a text", d)
	}
	v, err := strconv.ParseInt(args[0], 10, 32)
	if err != nil {
		return fmt.Errorf("%s: %v", d, err)
	}
	c := Code{Value: int32(v), Text: strings.Join(args[1:], " "), Line: n}
	if d == "message" {
		p.s.Messages = append(p.s.Messages, c)
		return nil
	}
	if len(args) == 3 && token.IsIdentifier(args[2]) {
		c.Text, c.Go = args[1], args[2]
	} else if len(args) != 2 {
		return errors.New("code wants a number, one name and optionally a Go constant")
	}
	if prev, ok := p.codes[c.Value]; ok {
		return fmt.Errorf("code %d already named on line %d", c.Value, prev)
	}
	p.codes[c.Value] = n
	p.s.Codes = append(p.s.Codes, c)
	return nil
}

// finish checks what only the whole list can show.
func (p *parser) finish() error {
	s := p.s
	if len(p.roles) > 0 {
		for o := gpurt.Op(0); o < gpurt.NumOps; o++ {
			if _, ok := p.roles[o.String()]; !ok {
				return fmt.Errorf("no fn plays role %s (a list with roles needs all of them)", o)
			}
		}
	}
	switch {
	case len(s.ABI) > 0 && len(p.roles) == 0:
		return errors.New("abi lines without roles (the ABI is of gpurt's shared calls)")
	case s.Package == "":
		return errors.New("no package line")
	case len(s.Funcs) == 0:
		return errors.New("no fn lines")
	case (len(s.Codes) > 0 || len(s.Messages) > 0) && s.Result == "":
		return errors.New("code or message lines without a result line")
	case s.ErrorKind != "" && (s.Result == "" || s.Vendor == ""):
		return errors.New("an errors line needs a result line and a vendor line")
	case s.Compiler != nil && s.ErrorKind == "":
		return errors.New("a compiler line needs an errors line")
	}
	for _, name := range s.Compiler {
		if _, ok := p.seen[name]; !ok {
			return fmt.Errorf("compiler entry point %s is not an fn", name)
		}
	}
	return nil
}
