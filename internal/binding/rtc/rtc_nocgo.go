//go:build !cgo

package rtc

import "github.com/detcoll/detcoll/internal/binding"

// ErrorString has no compiler to ask without cgo.
func ErrorString(uintptr, int32) (string, bool) { return "", false }

// Version fails without cgo (code CodeUnavailable).
func Version(uintptr) (int, int, int32) { return 0, 0, binding.CodeUnavailable }

// Ints fails without cgo (code CodeUnavailable).
func Ints(uintptr, int) ([]int, int32) { return nil, binding.CodeUnavailable }

// Compile fails without cgo.
func Compile[R binding.Code, V binding.Vendor](Program, func(string, R) error, string, string, []string) ([]byte, string, error) {
	return nil, "", ErrNoCgo
}
