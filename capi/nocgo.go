//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// Without cgo there is no C API: the command only says so.
func main() {
	fmt.Fprintln(os.Stderr, "capi: built without cgo; build libdetcoll.so with CGO_ENABLED=1 go build -buildmode=c-shared -o bin/libdetcoll.so ./capi")
	os.Exit(1)
}
