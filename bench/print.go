package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/detcoll/detcoll/dtype"
)

// RowPrinter prints a report's rows as they finish, in one of two formats:
//
//   - "table": detcoll's columns (see Report.Table);
//   - "nccl-tests": the columns of NVIDIA's nccl-tests (size, count, type,
//     redop, root, then time, algbw, busbw and #wrong out of place and in
//     place), with its size and busbw conventions (NCCLTestsSize,
//     BusBytes), so that its parsers and habits carry over; detcoll's
//     algorithm is a last extra column.
//
// Columns have fixed widths, so rows printed one at a time line up.
type RowPrinter struct {
	mu     sync.Mutex
	w      io.Writer
	format string
	header bool
	lastOp Op
	sym    bool // the sym µs column (GPU backends: NCCL's symmetric buffers)
}

// NewRowPrinter returns a printer of format ("table" or "nccl-tests") to w.
func NewRowPrinter(w io.Writer, format string) *RowPrinter {
	if format == "" {
		format = "table"
	}
	return &RowPrinter{w: w, format: format}
}

// tableCols are the "table" columns: name, width, left-aligned.
var tableCols = []struct {
	name string
	w    int
	left bool
}{
	{"op", 14, true}, {"dtype", 5, true}, {"algorithm", 18, true}, {"bytes", 10, false},
	{"det µs", 10, false}, {"base µs", 10, false}, {"sym µs", 10, false}, {"ratio", 6, false},
	{"in GB/s", 8, false}, {"bus GB/s", 8, false}, {"base bus", 8, false},
	{"repeat", 6, false}, {"oracle", 6, false}, {"max|Δ| vs base", 14, false},
}

// peerCols follow tableCols when the report has a peer.
var peerCols = []struct {
	name string
	w    int
	left bool
}{{"peer µs", 10, false}, {"vs peer", 7, false}}

func pad(s string, w int, left bool) string {
	n := w - len([]rune(s))
	if n <= 0 {
		return s
	}
	if left {
		return s + strings.Repeat(" ", n)
	}
	return strings.Repeat(" ", n) + s
}

// Header prints the lines naming the run and the column heads.
func (p *RowPrinter) Header(r *Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.header = true
	p.sym = r.Backend != "cpu"
	names := strings.Join(r.Device.Names, ", ")
	if names != "" {
		names = ": " + names
	}
	transport := ""
	if r.Transport != "" {
		transport = ", transport " + r.Transport
	}
	commit := r.GitCommit
	if r.GitDirty != nil && *r.GitDirty {
		commit += " (dirty)"
	}
	var b strings.Builder
	lead := ""
	if p.format == "nccl-tests" {
		lead = "# "
	}
	fmt.Fprintf(&b, "%sdetcoll %s (commit %s) bench: W=%d on %d node(s), backend %s%s, device %s%s\n", lead,
		r.DetcollVersion, commit, r.WorldSize, r.Nodes, r.Backend, transport, r.Device.Kind, names)
	fmt.Fprintf(&b, "%scontract %s, accumulate %s; warmup %d, %d iterations × %d samples, median of the slowest rank\n", lead,
		r.Contract.Version, r.Contract.Accumulate, r.Warmup, r.Iterations, r.Samples)
	switch {
	case r.Baseline != "" && p.sym:
		fmt.Fprintf(&b, "%sbaseline (base): %s; sym: the same on symmetric registered buffers where the library has them; ratio: det over the faster\n", lead, r.Baseline)
	case r.Baseline != "":
		fmt.Fprintf(&b, "%sbaseline (base): %s\n", lead, r.Baseline)
	}
	if r.Peer != nil {
		fmt.Fprintf(&b, "%speer: %s (%s)\n", lead, r.Peer.Name, r.Peer.File)
	}
	if p.format == "nccl-tests" {
		b.WriteString("#                                                              out-of-place                       in-place          \n")
		b.WriteString("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong  algorithm\n")
		b.WriteString("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
	} else {
		var cells []string
		for _, c := range tableCols {
			if c.name == "sym µs" && !p.sym {
				continue
			}
			cells = append(cells, pad(c.name, c.w, c.left))
		}
		if r.Peer != nil {
			for _, c := range peerCols {
				cells = append(cells, pad(c.name, c.w, c.left))
			}
		}
		b.WriteString(strings.TrimRight(strings.Join(cells, "  "), " ") + "\n")
	}
	io.WriteString(p.w, b.String())
}

// Row prints one finished row.
func (p *RowPrinter) Row(r *Report, row Row) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.format == "nccl-tests" {
		if row.Operation != p.lastOp {
			fmt.Fprintf(p.w, "# %s\n", row.Operation) // nccl-tests has one binary per operation
			p.lastOp = row.Operation
		}
		io.WriteString(p.w, ncclTestsLine(r.WorldSize, row)+"\n")
		return
	}
	v := []string{string(row.Operation), row.DType, row.Algorithm, HumanBytes(row.InputBytes),
		fixed(row.Deterministic.MedianUS, 1), fixed(row.Native.MedianUS, 1), symUS(row), fixed(row.LatencyRatioVsNative, 2),
		sig(row.InputGBps), sig(row.BusGBps), sig(row.NativeBusGBps),
		mark(row.RepeatBitwise), mark(row.OracleBitwise), strconv.FormatFloat(float64(row.MaxAbsVsNative), 'g', 3, 64)}
	var cells []string
	for i, c := range tableCols {
		if c.name == "sym µs" && !p.sym {
			continue
		}
		cells = append(cells, pad(v[i], c.w, c.left))
	}
	if r.Peer != nil {
		pv := []string{"-", "-"}
		if row.PeerMedianUS > 0 {
			pv = []string{fixed(row.PeerMedianUS, 1), fixed(row.LatencyRatioVsPeer, 2)}
		}
		for i, c := range peerCols {
			cells = append(cells, pad(pv[i], c.w, c.left))
		}
	}
	io.WriteString(p.w, strings.Join(cells, "  ")+"\n")
}

// symUS is the symmetric-buffer baseline's median, "-" without one.
func symUS(row Row) string {
	if row.NativeSymmetric == nil {
		return "-"
	}
	return fixed(row.NativeSymmetric.MedianUS, 1)
}

// Footer prints the summary after the last row.
func (p *RowPrinter) Footer(r *Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lead := ""
	if p.format == "nccl-tests" {
		lead = "# "
	}
	fmt.Fprintf(p.w, "%sall ranks repeat bitwise: %s\n", lead, mark(r.AllRankRepeatBitwise))
}

// NCCLTestsSize is the size and count nccl-tests prints for a row of input
// bytes per rank over w ranks: all_reduce the buffer (count its elements);
// all_gather the whole output, W·input (count: elements per rank);
// reduce_scatter the whole input (count: elements of each rank's output).
func NCCLTestsSize(op Op, dt dtype.DType, w int, inputBytes int64) (size, count int64) {
	sz := int64(max(dt.Size(), 1))
	switch op {
	case AllGather:
		return int64(w) * inputBytes, inputBytes / sz
	case ReduceScatter:
		return inputBytes, inputBytes / sz / int64(max(w, 1))
	}
	return inputBytes, inputBytes / sz
}

// ncclTypeName is nccl-tests' name of a dtype.
func ncclTypeName(d string) string {
	switch d {
	case "fp32":
		return "float"
	case "fp16":
		return "half"
	case "bf16":
		return "bfloat16"
	case "fp64":
		return "double"
	}
	return d
}

func ncclTestsLine(w int, row Row) string {
	dt, _ := dtype.Parse(row.DType)
	size, count := NCCLTestsSize(row.Operation, dt, w, row.InputBytes)
	redop := "sum"
	if row.Operation == AllGather {
		redop = "none"
	}
	cols := func(t Timing, wrong int64, ok bool) string {
		us := t.MedianUS
		if !(us > 0) {
			return fmt.Sprintf("%8s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A")
		}
		alg := float64(size) / (us * 1e3)
		bus := BusBytes(row.Operation, w, int(row.InputBytes)) / (us * 1e3)
		wr := strconv.FormatInt(wrong, 10)
		if !ok && wrong == 0 {
			wr = "?" // not equal to the oracle, count unknown
		}
		return fmt.Sprintf("%8s  %6.2f  %6.2f  %5s", fixedUS(us), alg, bus, wr)
	}
	in := cols(Timing{}, 0, true)
	if row.InPlace != nil {
		in = cols(row.InPlace.Timing, row.InPlace.WrongElements, row.InPlace.OracleBitwise)
	}
	return fmt.Sprintf("%12d  %12d  %8s  %6s  %6d  %s  %s  %s", size, count, ncclTypeName(row.DType), redop, -1,
		cols(row.Deterministic, row.WrongElements, row.OracleBitwise), in, row.Algorithm)
}

// fixedUS formats a time as nccl-tests does: two decimals below 10 ms,
// fewer above so that the column keeps its width.
func fixedUS(us float64) string {
	switch {
	case us >= 1e7:
		return fmt.Sprintf("%.0f", us)
	case us >= 1e5:
		return fmt.Sprintf("%.1f", us)
	}
	return fmt.Sprintf("%.2f", us)
}
