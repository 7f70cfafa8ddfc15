package bench

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Table writes the report as an aligned text table: a header line naming
// the run, then one line per row with the operation, dtype, algorithm,
// input bytes per rank (binary units), the deterministic and native median
// latencies in µs, their ratio, input and bus bandwidth in GB/s (1e9 B/s)
// of the deterministic run, and the repeat and oracle checks (✓ or ✗).
func (r *Report) Table(w io.Writer) error {
	p := NewRowPrinter(w, "table")
	p.Header(r)
	for _, row := range r.Rows {
		p.Row(r, row)
	}
	p.Footer(r)
	return nil
}

// writeAligned writes cells as columns two spaces apart: the first left
// columns aligned left, the rest (numbers, marks) aligned right.
func writeAligned(w io.Writer, cells [][]string, left int) error {
	var widths []int
	for _, row := range cells {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, row := range cells {
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < left {
				b.WriteString(c)
				if i < len(row)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sig formats a bandwidth with about three significant digits.
func sig(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || a == 0:
		return fixed(v, 0)
	case a >= 10:
		return fixed(v, 1)
	case a >= 1:
		return fixed(v, 2)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func fixed(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// HumanBytes formats n in binary units: "512 B", "4 KiB", "1.5 MiB", "256 MiB".
func HumanBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for math.Abs(v) >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 || v == math.Trunc(v) {
		return fmt.Sprintf("%d %s", int64(v), units[u])
	}
	s := strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0")
	return strings.TrimSuffix(s, ".") + " " + units[u]
}
