// Package probefmt holds the vendor-neutral parts of the GPU probes
// (gpu/devrt/cudart.Probe, gpu/rocm.Probe) and of their `detcoll env`
// reports: the peer-access matrix and the report's line formats. Pure Go;
// it imports neither vendor.
package probefmt

import (
	"fmt"
	"strings"
)

// KeyWidth is the width of the key column of a report.
const KeyWidth = 14

// Line writes "key value", else "key unavailable: err", else "key unknown".
func Line(b *strings.Builder, key, value, err string) {
	switch {
	case value != "":
		Field(b, key, value)
	case err != "":
		fmt.Fprintf(b, "%-*s unavailable: %s\n", KeyWidth, key, err)
	default:
		fmt.Fprintf(b, "%-*s unknown\n", KeyWidth, key)
	}
}

// Field writes "key value" (key padded to KeyWidth).
func Field(b *strings.Builder, key, value string) {
	fmt.Fprintf(b, "%-*s %s\n", KeyWidth, key, value)
}

// PeerAccess builds the n×n peer-access matrix: the diagonal is true,
// entry [i][j] is can(i, j); errors are returned in order, and the entry
// is what can returned with its error.
func PeerAccess(n int, can func(i, j int) (bool, error)) ([][]bool, []string) {
	var errs []string
	m := make([][]bool, n)
	for i := range m {
		m[i] = make([]bool, n)
		for j := 0; j < n; j++ {
			if i == j {
				m[i][j] = true
				continue
			}
			ok, err := can(i, j)
			if err != nil {
				errs = append(errs, err.Error())
			}
			m[i][j] = ok
		}
	}
	return m, errs
}

// Tail writes the end of a report: the peer-access matrix when there is
// more than one GPU (Y: can access, .: cannot), then one line per error.
func Tail(b *strings.Builder, peer [][]bool, errs []string) {
	if len(peer) > 1 {
		b.WriteString("peer access:\n")
		for r, row := range peer {
			fmt.Fprintf(b, "  %d:", r)
			for _, ok := range row {
				if ok {
					b.WriteString(" Y")
				} else {
					b.WriteString(" .")
				}
			}
			b.WriteByte('\n')
		}
	}
	for _, e := range errs {
		fmt.Fprintf(b, "error: %s\n", e)
	}
}

// Library is one library's fields of a probe: its version and path when it
// loaded (loadErr nil), with problem the reason its version could not be
// read; else problem "no <name>: <loadErr>". path and version are called
// only for a loaded library.
func Library(name string, loadErr error, path func() string, version func() (string, error)) (v, p, problem string) {
	if loadErr != nil {
		return "", "", "no " + name + ": " + loadErr.Error()
	}
	v, err := version()
	if err != nil {
		return "", path(), err.Error()
	}
	return v, path(), ""
}

// VersionLine writes a library's report line: "key version (path)", else
// the reason it is unavailable (Line).
func VersionLine(b *strings.Builder, key, version, path, err string) {
	if version != "" && path != "" {
		version += " (" + path + ")"
	}
	Line(b, key, version, err)
}

// Errs collects the errors of one device's probe calls.
type Errs []string

// Note adds err, if any.
func (e *Errs) Note(err error) {
	if err != nil {
		*e = append(*e, err.Error())
	}
}

// String is the errors joined by "; " ("" for none).
func (e Errs) String() string { return strings.Join(e, "; ") }
