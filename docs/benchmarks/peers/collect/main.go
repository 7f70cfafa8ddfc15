// Command collect merges the raw outputs of docs/benchmarks/peers/run.sh
// (detcoll bench reports, mpi_bench and gloo_bench JSON lines) into one
// JSON file of rows, one markdown table and one plot.
//
//	go run ./docs/benchmarks/peers/collect -in RAWDIR -meta META.txt -out docs/benchmarks/peers-cpu-DATE
//
// A row of the JSON output (an array; this is the schema `detcoll bench
// --peer` reads):
//
//	{"name": "mpi_shm", "op": "all_reduce", "dtype": "fp32", "world_size": 4,
//	 "bytes": 65536, "median_us": 51.2, "min_us": 48.0, "max_us": 60.3,
//	 "samples": 9}
//
// name is detcoll_shm, detcoll_tcp, mpi_shm, mpi_tcp or gloo; op is
// all_reduce, all_gather or reduce_scatter; bytes is detcoll's input_bytes
// per rank; the times are the slowest rank's mean per call, median, min and
// max over every sample of every round (samples of them). A peer that cannot
// run a row has "skipped": "reason" and no times.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Row is one line of the output.
type Row struct {
	Name      string  `json:"name"`
	Op        string  `json:"op"`
	DType     string  `json:"dtype"`
	WorldSize int     `json:"world_size"`
	Bytes     int64   `json:"bytes"`
	MedianUS  float64 `json:"median_us,omitempty"`
	MinUS     float64 `json:"min_us,omitempty"`
	MaxUS     float64 `json:"max_us,omitempty"`
	Samples   int     `json:"samples,omitempty"`
	Skipped   string  `json:"skipped,omitempty"`
}

type key struct {
	name, op, dt string
	w            int
	bytes        int64
}

type raw struct {
	Name      string    `json:"name"`
	Op        string    `json:"op"`
	DType     string    `json:"dtype"`
	WorldSize int       `json:"world_size"`
	Bytes     int64     `json:"bytes"`
	SamplesUS []float64 `json:"samples_us"`
	Skipped   string    `json:"skipped"`
}

// detcollReport is the part of a detcoll.bench.v1 report read here.
type detcollReport struct {
	WorldSize int `json:"world_size"`
	Rows      []struct {
		Operation     string `json:"operation"`
		DType         string `json:"dtype"`
		InputBytes    int64  `json:"input_bytes"`
		RepeatBitwise bool   `json:"repeat_bitwise"`
		OracleBitwise bool   `json:"oracle_bitwise"`
		Deterministic struct {
			SamplesUS []float64 `json:"samples_us"`
		} `json:"deterministic"`
	} `json:"rows"`
}

var (
	peers   = []string{"detcoll_shm", "mpi_shm", "detcoll_tcp", "mpi_tcp", "gloo"}
	ops     = []string{"all_reduce", "all_gather", "reduce_scatter"}
	dtypes  = []string{"fp32", "bf16"}
	palette = []color.Color{
		color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff}, color.RGBA{0x59, 0xa1, 0x4f, 0xff},
		color.RGBA{0xe1, 0x57, 0x59, 0xff}, color.RGBA{0xb0, 0x7a, 0xa1, 0xff},
	}
)

func main() {
	in := flag.String("in", "", "directory of raw outputs")
	meta := flag.String("meta", "", "run description (commit, date, machine, command)")
	out := flag.String("out", "", "output path without extension (.json, .md and .png are written)")
	flag.Parse()
	if *in == "" || *out == "" {
		log.Fatal("collect: -in and -out are required")
	}
	c := collected{samples: map[key][]float64{}, skipped: map[key]string{}, bitwise: map[key]bool{}}
	files, _ := filepath.Glob(filepath.Join(*in, "*"))
	for _, f := range files {
		c.readFile(f)
	}
	rows := c.rows()
	js, _ := json.MarshalIndent(rows, "", " ")
	must(os.WriteFile(*out+".json", append(js, '\n'), 0o644))
	metaText := ""
	if *meta != "" {
		b, _ := os.ReadFile(*meta)
		metaText = string(b)
	}
	must(os.WriteFile(*out+".md", []byte(markdown(rows, c.bitwise, metaText, filepath.Base(*out))), 0o644))
	must(drawPlot(rows, *out+".png"))
}

// collected is what the raw outputs say, by row.
type collected struct {
	samples map[key][]float64
	skipped map[key]string
	bitwise map[key]bool // detcoll rows: repeat and oracle bitwise in every run
}

// readFile adds one raw output: a detcoll report (NAME-….detcoll.json) or
// a peer's JSON lines (….jsonl); other files are ignored.
func (c *collected) readFile(f string) {
	b, err := os.ReadFile(f)
	if err != nil {
		log.Fatal(err)
	}
	base := filepath.Base(f)
	switch {
	case strings.HasSuffix(base, ".detcoll.json"):
		var r detcollReport
		if err := json.Unmarshal(b, &r); err != nil {
			log.Fatalf("%s: %v", f, err)
		}
		name := base[:strings.IndexByte(base, '-')]
		for _, row := range r.Rows {
			k := key{name, row.Operation, row.DType, r.WorldSize, row.InputBytes}
			c.samples[k] = append(c.samples[k], row.Deterministic.SamplesUS...)
			ok, seen := c.bitwise[k]
			c.bitwise[k] = (ok || !seen) && row.RepeatBitwise && row.OracleBitwise
		}
	case strings.HasSuffix(base, ".jsonl"):
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(line), "{") {
				continue
			}
			var r raw
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				log.Fatalf("%s: %v", f, err)
			}
			k := key{r.Name, r.Op, r.DType, r.WorldSize, r.Bytes}
			if r.Skipped != "" {
				c.skipped[k] = r.Skipped
				continue
			}
			c.samples[k] = append(c.samples[k], r.SamplesUS...)
		}
	}
}

// rows is one row per measured or skipped key, in the output's order:
// by operation, dtype, W, bytes and peer.
func (c *collected) rows() []Row {
	var rows []Row
	for k, s := range c.samples {
		sort.Float64s(s)
		rows = append(rows, Row{Name: k.name, Op: k.op, DType: k.dt, WorldSize: k.w, Bytes: k.bytes,
			MedianUS: s[len(s)/2], MinUS: s[0], MaxUS: s[len(s)-1], Samples: len(s)})
	}
	for k, why := range c.skipped {
		rows = append(rows, Row{Name: k.name, Op: k.op, DType: k.dt, WorldSize: k.w, Bytes: k.bytes, Skipped: why})
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Op != b.Op {
			return idx(ops, a.Op) < idx(ops, b.Op)
		}
		if a.DType != b.DType {
			return idx(dtypes, a.DType) < idx(dtypes, b.DType)
		}
		if a.WorldSize != b.WorldSize {
			return a.WorldSize < b.WorldSize
		}
		if a.Bytes != b.Bytes {
			return a.Bytes < b.Bytes
		}
		return idx(peers, a.Name) < idx(peers, b.Name)
	})
	return rows
}

func idx(l []string, s string) int {
	for i, x := range l {
		if x == s {
			return i
		}
	}
	return len(l)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func human(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

func cell(r *Row) string {
	if r == nil {
		return "—"
	}
	if r.Skipped != "" {
		return "n/a"
	}
	return fmt.Sprintf("%.4g (%.3g–%.3g)", r.MedianUS, r.MinUS, r.MaxUS)
}

func ratio(a, b *Row) (float64, string) {
	if a == nil || b == nil || a.Skipped != "" || b.Skipped != "" || b.MedianUS == 0 {
		return math.NaN(), "—"
	}
	q := a.MedianUS / b.MedianUS
	s := fmt.Sprintf("%.2f", q)
	if q > 1 {
		s = "**" + s + "**"
	}
	return q, s
}

type target struct {
	what     string
	a, b     string
	limit    float64
	holds    int
	total    int
	worst    float64
	worstRow string
	// The same comparison on each side's fastest sample: what each can do
	// when the machine lets it (busy-polling peers suffer most from load).
	minHolds int
	minWorst float64
	minRow   string
}

// add counts one row's comparison, where naming it: q is the ratio of the
// medians (NaN when either side is missing), x and y the two sides.
func (t *target) add(q float64, x, y *Row, where string) {
	if !math.IsNaN(q) && y.MinUS > 0 {
		mq := x.MinUS / y.MinUS
		if mq <= t.limit {
			t.minHolds++
		}
		if mq > t.minWorst {
			t.minWorst, t.minRow = mq, where
		}
	}
	if !math.IsNaN(q) {
		t.total++
		if q <= t.limit {
			t.holds++
		}
		if q > t.worst {
			t.worst, t.worstRow = q, where
		}
	}
}

// tableCfg is one table of the markdown: an (operation, dtype, W).
type tableCfg struct {
	op, dt string
	w      int
}

// byTable groups the rows by table, then bytes, then peer; the tables are
// in the order of their first row.
func byTable(rows []Row) ([]tableCfg, map[tableCfg]map[int64]map[string]*Row) {
	byCfg := map[tableCfg]map[int64]map[string]*Row{}
	var cfgs []tableCfg
	for i := range rows {
		r := &rows[i]
		c := tableCfg{r.Op, r.DType, r.WorldSize}
		if byCfg[c] == nil {
			byCfg[c] = map[int64]map[string]*Row{}
			cfgs = append(cfgs, c)
		}
		if byCfg[c][r.Bytes] == nil {
			byCfg[c][r.Bytes] = map[string]*Row{}
		}
		byCfg[c][r.Bytes][r.Name] = r
	}
	return cfgs, byCfg
}

func markdown(rows []Row, bitwise map[key]bool, meta, stem string) string {
	cfgs, byCfg := byTable(rows)
	targets := []*target{
		{what: "detcoll shm ≤ 1.0 × Open MPI shared memory", a: "detcoll_shm", b: "mpi_shm", limit: 1},
		{what: "detcoll forced TCP ≤ 1.0 × Open MPI TCP", a: "detcoll_tcp", b: "mpi_tcp", limit: 1},
		{what: "detcoll shm faster than Gloo", a: "detcoll_shm", b: "gloo", limit: 1},
	}
	var body strings.Builder
	notBitwise := 0
	for _, c := range cfgs {
		notBitwise += writeTable(&body, c, byCfg[c], targets, bitwise)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "# detcoll against Open MPI and Gloo on one host (%s)\n\n", stem)
	s.WriteString("Written by `docs/benchmarks/peers/run.sh` (collector: `docs/benchmarks/peers/collect`).\n\n```\n" + meta + "```\n\n")
	s.WriteString("Times are µs per call, the slowest rank's, median (min–max) over every sample of every round; " +
		"bytes are detcoll's input bytes per rank (all_gather: the block each rank sends; reduce_scatter: the W blocks each rank sends). " +
		"Ratios are medians, detcoll over the peer (bold: detcoll slower). detcoll runs its `auto` algorithm. " +
		"n/a: the peer has no such collective (torch 1.13's Gloo: no reduce_scatter, no bf16); Open MPI's bf16 is MPI_UINT16_T with a user-defined sum.\n\n")
	s.WriteString("## Targets\n\nBy median (every sample of every round) and by each side's fastest sample.\n\n" +
		"| target | holds, medians | worst median ratio (where) | holds, fastest samples | worst fastest-sample ratio (where) |\n|---|---|---|---|---|\n")
	for _, t := range targets {
		fmt.Fprintf(&s, "| %s | %d of %d | %.2f (%s) | %d of %d | %.2f (%s) |\n", t.what, t.holds, t.total, t.worst, t.worstRow,
			t.minHolds, t.total, t.minWorst, t.minRow)
	}
	fmt.Fprintf(&s, "\ndetcoll rows not repeat- and oracle-bitwise in every run: %d.\n", notBitwise)
	fmt.Fprintf(&s, "\n![latency against size](%s.png)\n", stem)
	s.WriteString("\n## Rows\n")
	s.WriteString(body.String())
	return s.String()
}

// writeTable writes table c (bySize: its rows by bytes, then peer), in
// increasing bytes, counts every row's comparison into targets, and returns
// how many of its detcoll rows were not bitwise in every run.
func writeTable(body *strings.Builder, c tableCfg, bySize map[int64]map[string]*Row, targets []*target, bitwise map[key]bool) int {
	fmt.Fprintf(body, "\n### %s %s, W = %d\n\n", c.op, c.dt, c.w)
	body.WriteString("| bytes/rank | detcoll shm | Open MPI shm | detcoll tcp | Open MPI tcp | Gloo | shm / MPI shm | tcp / MPI tcp | shm / Gloo |\n|---|---|---|---|---|---|---|---|---|\n")
	var sizes []int64
	for b := range bySize {
		sizes = append(sizes, b)
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	notBitwise := 0
	for _, b := range sizes {
		m := bySize[b]
		fmt.Fprintf(body, "| %s |", human(b))
		for _, p := range peers {
			fmt.Fprintf(body, " %s |", cell(m[p]))
		}
		for _, t := range targets {
			q, s := ratio(m[t.a], m[t.b])
			fmt.Fprintf(body, " %s |", s)
			t.add(q, m[t.a], m[t.b], fmt.Sprintf("%s %s W=%d %s", c.op, c.dt, c.w, human(b)))
		}
		body.WriteString("\n")
		for _, p := range []string{"detcoll_shm", "detcoll_tcp"} {
			if ok, seen := bitwise[key{p, c.op, c.dt, c.w, b}]; seen && !ok {
				notBitwise++
			}
		}
	}
	return notBitwise
}

// drawPlot: one panel per (operation, dtype) and W, median latency against
// bytes per rank, both axes log10, one line per peer.
func drawPlot(rows []Row, path string) error {
	ws := map[int]bool{}
	for _, r := range rows {
		ws[r.WorldSize] = true
	}
	var wl []int
	for w := range ws {
		wl = append(wl, w)
	}
	sort.Ints(wl)
	nrows := len(ops) * len(dtypes)
	const pw, ph = 5.5 * vg.Inch, 3.6 * vg.Inch
	img := vgimg.New(pw*vg.Length(len(wl)), ph*vg.Length(nrows))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: nrows, Cols: len(wl), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	for oi, op := range ops {
		for di, dt := range dtypes {
			for wi, w := range wl {
				p := plot.New()
				p.Title.Text = fmt.Sprintf("%s %s, W=%d", op, dt, w)
				p.X.Label.Text = "bytes per rank (log10)"
				p.Y.Label.Text = "µs (log10)"
				p.Add(plotter.NewGrid())
				p.Legend.Top, p.Legend.Left = true, true
				for pi, name := range peers {
					var pts plotter.XYs
					for _, r := range rows {
						if r.Name == name && r.Op == op && r.DType == dt && r.WorldSize == w && r.Skipped == "" && r.MedianUS > 0 {
							pts = append(pts, plotter.XY{X: math.Log10(float64(r.Bytes)), Y: math.Log10(r.MedianUS)})
						}
					}
					if len(pts) == 0 {
						continue
					}
					sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
					l, sc, err := plotter.NewLinePoints(pts)
					if err != nil {
						return err
					}
					l.Color, sc.Color = palette[pi], palette[pi]
					sc.Shape = plotutil.Shape(pi)
					if strings.HasSuffix(name, "tcp") {
						l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
					}
					p.Add(l, sc)
					p.Legend.Add(name, l, sc)
				}
				p.Draw(tiles.At(dc, wi, oi*len(dtypes)+di))
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}
