package bench

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot draws the median latency against the input bytes per rank, both
// axes logarithmic: one solid series per (operation, algorithm) of the
// deterministic collectives and one dashed series per operation for the
// baseline. The format follows path's extension, ".svg" or ".png".
func (r *Report) Plot(path string) error {
	return r.plot(path, "median latency, slowest rank (µs)", func(row Row) (float64, float64) {
		return row.Deterministic.MedianUS, row.Native.MedianUS
	})
}

// PlotBandwidth draws the bus bandwidth (nccl-tests' busbw, GB/s: see
// BusBytes) against the input bytes per rank, as Plot does the latency.
func (r *Report) PlotBandwidth(path string) error {
	return r.plot(path, "bus bandwidth, slowest rank (GB/s)", func(row Row) (float64, float64) {
		return row.BusGBps, row.NativeBusGBps
	})
}

// BandwidthPlotPath is where `detcoll bench --plot P` writes the bandwidth
// plot: P with "-bandwidth" before its extension.
func BandwidthPlotPath(path string) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-bandwidth" + ext
}

// plot draws one figure: y(row) of the deterministic rows and of the baseline.
func (r *Report) plot(path, ylabel string, y func(Row) (det, base float64)) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("bench: plot %s: want a .svg or .png file", path)
	}
	s := r.plotSeries(y)
	if len(s.order) == 0 {
		return fmt.Errorf("bench: plot %s: no positive values to plot", path)
	}
	p := r.newFigure(ylabel)
	legend := plot.NewLegend()
	legend.TextStyle.Font = plotFont(legend.TextStyle.Font.Size)
	legend.Top, legend.Left = true, true
	p.Add(plotter.NewGrid())
	if err := s.addLines(p, &legend); err != nil {
		return err
	}
	s.setRanges(p)
	wt, err := render(p, &legend, 10*vg.Inch, 5.5*vg.Inch, ext[1:])
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	return writePlotFile(path, ext, wt)
}

// seriesKey names one line of a figure: a deterministic (operation,
// algorithm) or, native set, the baseline of an operation.
type seriesKey struct {
	op     Op
	alg    string
	native bool
}

// plotSeries are the points of a figure's lines, x → y by line, with the
// lines in the order they were first seen.
type plotSeries struct {
	points map[seriesKey]map[int64]float64
	order  []seriesKey
}

// add records the point (x, y) of line k, unless a log axis cannot show it.
func (s *plotSeries) add(k seriesKey, x int64, y float64) {
	if x <= 0 || !(y > 0) || math.IsInf(y, 0) { // a log axis cannot show them
		return
	}
	m, ok := s.points[k]
	if !ok {
		m = map[int64]float64{}
		s.points[k] = m
		s.order = append(s.order, k)
	}
	m[x] = y
}

// plotSeries collects y(row) of every row: the deterministic lines first,
// then the baseline's, named by the baseline's short name.
func (r *Report) plotSeries(y func(Row) (det, base float64)) *plotSeries {
	s := &plotSeries{points: map[seriesKey]map[int64]float64{}}
	baseName := "native"
	if r.Baseline != "" {
		baseName = r.Baseline
		if i := strings.Index(baseName, " ("); i > 0 {
			baseName = baseName[:i] // "ring (detcoll's reference …)" → "ring"
		}
	}
	for _, row := range r.Rows {
		det, _ := y(row)
		s.add(seriesKey{row.Operation, row.Algorithm, false}, row.InputBytes, det)
	}
	for _, row := range r.Rows {
		_, base := y(row)
		s.add(seriesKey{row.Operation, baseName, true}, row.InputBytes, base)
	}
	return s
}

// newFigure is a plot titled for the report, with log axes labelled.
func (r *Report) newFigure(ylabel string) *plot.Plot {
	p := newPlot()
	dts := map[string]bool{}
	for _, row := range r.Rows {
		dts[row.DType] = true
	}
	var dtl []string
	for d := range dts {
		dtl = append(dtl, d)
	}
	sort.Strings(dtl)
	via := ""
	if r.Transport != "" {
		via = " over " + r.Transport
	}
	p.Title.Text = fmt.Sprintf("detcoll bench: %s, W=%d, backend %s%s", strings.Join(dtl, "/"), r.WorldSize, r.Backend, via)
	p.X.Label.Text = "input bytes per rank"
	p.Y.Label.Text = ylabel
	// Both axes carry log10 of the value on a linear scale, with ticks
	// labelled in the original units: gonum's LogScale centres the axis
	// label on the arithmetic mean of the range, which pads a log axis
	// badly, and panics on non-positive ranges.
	p.X.Tick.Marker = bytesTicks{}
	p.Y.Tick.Marker = decadeTicks{}
	return p
}

// addLines adds every line, in order, to p and legend: a colour and a point
// shape each, dashed for the baseline.
func (s *plotSeries) addLines(p *plot.Plot, legend *plot.Legend) error {
	for i, k := range s.order {
		pts := make(plotter.XYs, 0, len(s.points[k]))
		for x, y := range s.points[k] {
			pts = append(pts, plotter.XY{X: math.Log10(float64(x)), Y: math.Log10(y)})
		}
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		line, scatter, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("bench: plot: %w", err)
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		scatter.Color = palette[i%len(palette)]
		scatter.Shape = plotutil.Shape(i)
		name := fmt.Sprintf("%s %s", k.op, k.alg)
		if k.native {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line, scatter)
		legend.Add(name, line, scatter)
	}
	return nil
}

// setRanges sets p's axes to the points' ranges, padded by a factor: a log
// axis cannot take gonum's default ±1 padding of a single value.
func (s *plotSeries) setRanges(p *plot.Plot) {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, m := range s.points {
		for x, y := range m {
			xmin, xmax = min(xmin, float64(x)), max(xmax, float64(x))
			ymin, ymax = min(ymin, y), max(ymax, y)
		}
	}
	p.X.Min, p.X.Max = math.Log10(xmin/1.3), math.Log10(xmax*1.3)
	p.Y.Min, p.Y.Max = math.Log10(ymin/1.5), math.Log10(ymax*1.5)
}

// writePlotFile writes the rendered figure to path through a temporary file
// in its directory, so that path is either the old file or the whole new one.
func writePlotFile(path, ext string, wt io.WriterTo) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".bench-plot-*"+ext)
	if err != nil {
		return fmt.Errorf("bench: plot %s: %w", path, errors.Unwrap(err))
	}
	_, werr := wt.WriteTo(f)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("bench: plot %s: writing failed", path)
	}
	os.Chmod(f.Name(), 0o644)
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("bench: plot %s: %w", path, errors.Unwrap(err))
	}
	return nil
}

// palette is Tableau's ten colours and two more: distinct for every series
// of a full run (3 operations × 3 algorithms + 3 native).
var palette = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff}, color.RGBA{0xe1, 0x57, 0x59, 0xff},
	color.RGBA{0x76, 0xb7, 0xb2, 0xff}, color.RGBA{0x59, 0xa1, 0x4f, 0xff}, color.RGBA{0xed, 0xc9, 0x48, 0xff},
	color.RGBA{0xb0, 0x7a, 0xa1, 0xff}, color.RGBA{0xff, 0x9d, 0xa7, 0xff}, color.RGBA{0x9c, 0x75, 0x5f, 0xff},
	color.RGBA{0xba, 0xb0, 0xac, 0xff}, color.RGBA{0x1f, 0x1f, 0x1f, 0xff}, color.RGBA{0x8c, 0x2d, 0x04, 0xff},
}

// plotFont is the plots' font: Liberation Sans, which SVG names with
// metric-compatible fallbacks (svgFontFamily) so that text measured with
// it here fits in viewers that do not have it.
func plotFont(size vg.Length) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Size: size}
}

// svgFontFamily replaces the font-family gonum writes (the one face) with
// the face and its fallbacks, ending in the generic family.
const svgFontFamily = "font-family:'Liberation Sans',Arimo,Arial,Helvetica,sans-serif;"

// newPlot is plot.New with plotFont on every text.
func newPlot() *plot.Plot {
	p := plot.New()
	for _, t := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle, &p.X.Tick.Label, &p.Y.Tick.Label} {
		t.Font = plotFont(t.Font.Size)
	}
	p.Title.Padding = vg.Points(6)
	return p
}

// render draws the plot with the legend in a panel on its right, turning a
// panic of the plotting library into an error. The whole canvas is painted
// white first and the legend has its own opaque box, so that viewers that
// show transparency (rsvg, browsers in dark mode) see no gaps. The legend
// panel is wider than its measured text by a fifth: an SVG viewer without
// Liberation Sans draws with a fallback that may be wider.
func render(p *plot.Plot, legend *plot.Legend, w, h vg.Length, format string) (wt io.WriterTo, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("rendering: %v", v)
		}
	}()
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return nil, err
	}
	dc := draw.New(c)
	white := color.White
	dc.SetColor(white)
	dc.Fill(dc.Rectangle.Path())
	space := legend.TextStyle.Width(" ")
	textW := legend.Rectangle(dc).Size().X
	legW := textW*1.2 + 4*space
	p.BackgroundColor = white
	p.Draw(draw.Crop(dc, 0, -legW, 0, 0))
	top := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + 2*p.Title.Padding + legend.TextStyle.Height("M")
	lc := draw.Crop(dc, w-legW+2*space, -2*space, 0, -top)
	lh := legend.Rectangle(lc).Size().Y
	box := vg.Rectangle{
		Min: vg.Point{X: lc.Min.X - space, Y: lc.Max.Y - lh - space/2},
		Max: vg.Point{X: min(lc.Min.X+textW*1.2+space, w-space/2), Y: lc.Max.Y + space/2},
	}
	dc.SetColor(white)
	dc.Fill(box.Path())
	dc.SetLineWidth(vg.Points(0.5))
	dc.SetLineDash(nil, 0)
	dc.SetColor(color.Gray{Y: 0x99})
	dc.Stroke(box.Path())
	legend.Draw(lc)
	if format == "svg" {
		return svgFonts{c}, nil
	}
	return c, nil
}

// svgFonts rewrites the SVG's font-family declarations (svgFontFamily).
type svgFonts struct{ c io.WriterTo }

func (s svgFonts) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	if _, err := s.c.WriteTo(&b); err != nil {
		return 0, err
	}
	out := fontFamilyRE.ReplaceAll(b.Bytes(), []byte(svgFontFamily))
	n, err := w.Write(out)
	return int64(n), err
}

var fontFamilyRE = regexp.MustCompile(`font-family:[^;"]*;`)

// bytesTicks labels a log10(bytes) axis at powers of 4 (1 KiB, 4 KiB, …)
// or, over wide ranges, powers of 16.
type bytesTicks struct{}

func (bytesTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 4.0
	if hi-lo > 7 {
		step = 16
	}
	var ticks []plot.Tick
	for v := 1.0; v <= math.Pow(10, hi)*1.0001; v *= step {
		if lv := math.Log10(v); lv >= lo-1e-9 {
			ticks = append(ticks, plot.Tick{Value: lv, Label: HumanBytes(int64(v))})
		}
	}
	if len(ticks) < 2 { // a narrow range: label its ends
		return []plot.Tick{{Value: lo, Label: HumanBytes(int64(math.Pow(10, lo)))}, {Value: hi, Label: HumanBytes(int64(math.Pow(10, hi)))}}
	}
	return ticks
}

// decadeTicks labels a log10 axis at powers of ten (1, 10, 100, 1000, 1e+04 …)
// with unlabelled minor ticks at 2…9 times them.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	major := 0
	for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
		for m := 1; m <= 9; m++ {
			v := math.Log10(float64(m)) + e
			if v < lo-1e-9 || v > hi+1e-9 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 {
				t.Label = strconv.FormatFloat(math.Pow(10, e), 'g', 4, 64)
				major++
			}
			ticks = append(ticks, t)
		}
	}
	if major < 2 { // less than a decade: label the ends
		ticks = append(ticks,
			plot.Tick{Value: lo, Label: strconv.FormatFloat(math.Pow(10, lo), 'g', 3, 64)},
			plot.Tick{Value: hi, Label: strconv.FormatFloat(math.Pow(10, hi), 'g', 3, 64)})
	}
	return ticks
}
