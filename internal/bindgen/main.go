// Command bindgen writes a GPU library binding's symbol table and result
// names from the library's one declarative list, symbols.txt (README.md
// here; docs/architecture.md, "Generated bindings").
//
// Run it in a binding package's directory (each has a //go:generate line):
//
//	go run ../bindgen          # symbols.txt → symbols_gen.go
//	go run ../bindgen -check   # exit 1 if symbols_gen.go is stale
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

const (
	specFile = "symbols.txt"
	outFile  = "symbols_gen.go"
)

func main() {
	check := flag.Bool("check", false, "report whether "+outFile+" is up to date instead of writing it")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "bindgen:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	src, err := os.ReadFile(specFile)
	if err != nil {
		return err
	}
	spec, err := Parse(specFile, src)
	if err != nil {
		return err
	}
	out, err := Generate(spec)
	if err != nil {
		return err
	}
	if check {
		old, err := os.ReadFile(outFile)
		if err != nil {
			return err
		}
		if !bytes.Equal(old, out) {
			return fmt.Errorf("%s is stale: run go generate", outFile)
		}
		return nil
	}
	return os.WriteFile(outFile, out, 0o644)
}
