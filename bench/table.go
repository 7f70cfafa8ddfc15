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
	names := strings.Join(r.Device.Names, ", ")
	if names != "" {
		names = ": " + names
	}
	transport := ""
	if r.Transport != "" {
		transport = ", transport " + r.Transport
	}
	if _, err := fmt.Fprintf(w, "detcoll %s bench: W=%d on %d node(s), backend %s%s, device %s%s\n"+
		"contract %s, accumulate %s; warmup %d, %d iterations × %d samples, median of the slowest rank\n",
		r.DetcollVersion, r.WorldSize, r.Nodes, r.Backend, transport, r.Device.Kind, names,
		r.Contract.Version, r.Contract.Accumulate, r.Warmup, r.Iterations, r.Samples); err != nil {
		return err
	}
	cells := [][]string{{"op", "dtype", "algorithm", "bytes", "det µs", "native µs", "ratio", "in GB/s", "bus GB/s", "native bus GB/s", "repeat", "oracle", "max|Δ| vs native"}}
	for _, row := range r.Rows {
		cells = append(cells, []string{string(row.Operation), row.DType, row.Algorithm, HumanBytes(row.InputBytes),
			fixed(row.Deterministic.MedianUS, 1), fixed(row.Native.MedianUS, 1), fixed(row.LatencyRatioVsNative, 2),
			sig(row.InputGBps), sig(row.BusGBps), sig(row.NativeBusGBps),
			mark(row.RepeatBitwise), mark(row.OracleBitwise), strconv.FormatFloat(float64(row.MaxAbsVsNative), 'g', 3, 64)})
	}
	if err := writeAligned(w, cells, 3); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "all ranks repeat bitwise: %s\n", mark(r.AllRankRepeatBitwise))
	return err
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
