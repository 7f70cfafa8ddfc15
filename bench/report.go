package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/detcoll/detcoll/dtype"
)

// SchemaV1 is the report's schema name (docs/contract.md, "Benchmark report").
const SchemaV1 = "detcoll.bench.v1"

// ContractTree names detcoll's reduction tree in the report's contract.
const ContractTree = "pairwise-adjacent-lower-left"

// Report is a benchmark report, schema detcoll.bench.v1 (docs/contract.md,
// "Benchmark report", lists every field). extra holds whatever the caller adds (for
// example raw_loopback_gbps). Later v1 reports may add fields; readers
// ignore the ones they do not know.
type Report struct {
	Schema               string         `json:"schema"`
	DetcollVersion       string         `json:"detcoll_version"`
	GitCommit            string         `json:"git_commit"`        // 40 hex digits or "unknown"
	GitDirty             *bool          `json:"git_dirty"`         // uncommitted changes in the tree built; null when unknown
	GitCommitSource      string         `json:"git_commit_source"` // ldflags, buildinfo, checkout or "" (see Build)
	StartedAt            string         `json:"started_at"`        // RFC 3339, UTC, rank 0's clock
	WorldSize            int            `json:"world_size"`
	Nodes                int            `json:"nodes"`
	Device               DeviceInfo     `json:"device"`
	Backend              string         `json:"backend"`
	Baseline             string         `json:"baseline"`       // what the native columns ran: "NCCL", "RCCL", "ring (detcoll's reference of Gloo's order)"
	Peer                 *PeerInfo      `json:"peer,omitempty"` // a real peer's figures (--peer), rows' peer_median_us
	Transport            string         `json:"transport,omitempty"`
	Contract             Contract       `json:"contract"`
	Warmup               int            `json:"warmup"`
	Iterations           int            `json:"iterations"`
	Samples              int            `json:"samples"`
	Graph                bool           `json:"graph"`
	Seed                 uint64         `json:"seed"`
	AllRankRepeatBitwise bool           `json:"all_rank_repeat_bitwise"` // AND of every row's repeat_bitwise
	Rows                 []Row          `json:"rows"`
	Extra                map[string]any `json:"extra,omitempty"`
}

// Contract names the arithmetic contract the deterministic rows ran under.
type Contract struct {
	Version    string `json:"version"`    // detcoll.ContractVersion
	Tree       string `json:"tree"`       // ContractTree
	Accumulate string `json:"accumulate"` // "native" or "f32"
}

// Row is one (operation, dtype, algorithm, size) measurement.
type Row struct {
	Operation          Op     `json:"operation"`
	DType              string `json:"dtype"`
	Algorithm          string `json:"algorithm"`            // gather_tree, a2a_tree, auto; direct for all_gather
	RequestedSizeBytes int64  `json:"requested_size_bytes"` // as configured
	InputBytes         int64  `json:"input_bytes"`          // per rank, as run (see Op)

	Deterministic Timing `json:"deterministic"`
	Native        Timing `json:"native"` // the baseline on default buffers
	// NativeSymmetric is the baseline on symmetric registered buffers, when
	// the backend and library have them (SymmetricCase); else absent.
	NativeSymmetric *Timing `json:"native_symmetric,omitempty"`
	// NativeBest is "default" or "symmetric": the faster baseline (by
	// median), the one latency_ratio_vs_native divides by.
	NativeBest string `json:"native_best"`

	LatencyRatioVsNative        float64 `json:"latency_ratio_vs_native"`         // deterministic median / the faster baseline's median
	LatencyRatioVsNativeDefault float64 `json:"latency_ratio_vs_native_default"` // deterministic median / the default-buffer baseline's median
	InputGBps                   float64 `json:"input_gbps"`                      // input_bytes / deterministic median, 1e9 B/s
	NativeInputGBps             float64 `json:"native_input_gbps"`               // input_bytes / native median
	BusGBps                     float64 `json:"bus_gbps"`                        // BusBytes / deterministic median
	NativeBusGBps               float64 `json:"native_bus_gbps"`                 // BusBytes / native median

	// RepeatBitwise: the output of the first run and of the last timed
	// iteration are the same bytes on every rank, and (all_reduce,
	// all_gather) every rank's output is the same bytes.
	RepeatBitwise bool `json:"repeat_bitwise"`
	// OracleBitwise: every rank's output equals the host reference
	// (reduce.Oracle over the regenerated inputs; all_gather: their
	// concatenation) byte for byte.
	OracleBitwise bool `json:"oracle_bitwise"`
	// MaxAbsVsNative is the largest |deterministic - native| over the
	// output elements of every rank (positions where both are NaN skipped;
	// NaN against a number is +Inf). Native is a performance reference.
	MaxAbsVsNative Float `json:"max_abs_vs_native"`

	// WrongElements is the number of output elements, over every rank's
	// checked range (see the package doc), that differ from the oracle:
	// nccl-tests' #wrong. 0 when oracle_bitwise.
	WrongElements int64 `json:"wrong_elements"`
	// InPlace is the same algorithm run in place (recv = send for
	// all_reduce, send = this rank's block of recv for all_gather), when
	// the backend can (absent for reduce_scatter, which detcoll does not
	// run in place).
	InPlace *InPlace `json:"in_place,omitempty"`
	// PeerMedianUS is the peer's median for this (operation, dtype,
	// input_bytes) and LatencyRatioVsPeer the deterministic median over it,
	// when the report has a peer with that row; else absent.
	PeerMedianUS       float64 `json:"peer_median_us,omitempty"`
	LatencyRatioVsPeer float64 `json:"latency_ratio_vs_peer,omitempty"`

	WorkspaceBytes           int64 `json:"workspace_bytes"`             // detcoll workspace retained after the row (max over ranks)
	PeakAllocatedBytes       int64 `json:"peak_allocated_bytes"`        // detcoll's peak extra allocation in the row (max over ranks)
	NativePeakAllocatedBytes int64 `json:"native_peak_allocated_bytes"` // the native collective's (max over ranks)
}

// InPlace is a row's in-place measurement and check.
type InPlace struct {
	Timing        Timing `json:"timing"`
	OracleBitwise bool   `json:"oracle_bitwise"`
	WrongElements int64  `json:"wrong_elements"`
}

// Timing summarises samples; every sample is the slowest rank's mean time
// of one iteration, in microseconds.
type Timing struct {
	MedianUS  float64   `json:"median_us"`
	MinUS     float64   `json:"min_us"`
	MaxUS     float64   `json:"max_us"`
	SamplesUS []float64 `json:"samples_us"`
}

func newTiming(samples []float64) Timing {
	t := Timing{SamplesUS: samples}
	if len(samples) == 0 {
		return t
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	t.MinUS, t.MaxUS = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		t.MedianUS = s[n/2]
	} else {
		t.MedianUS = (s[n/2-1] + s[n/2]) / 2
	}
	return t
}

// Float is a float64 that survives JSON when it is not finite: finite
// values are plain numbers; +Inf, -Inf and NaN are the strings "+Inf",
// "-Inf" and "NaN".
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("bench: bad float %q", s)
		}
		*f = Float(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Float(v)
	return nil
}

// Marshal returns the report as indented JSON.
func (r *Report) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bench: encoding report: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteJSON writes the report to path (indented JSON), atomically: a
// temporary file in the same directory renamed over path.
func (r *Report) WriteJSON(path string) error {
	b, err := r.Marshal()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".bench-*.json")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// ReadJSON reads a report written by WriteJSON. It fails on a schema other
// than detcoll.bench.v1 and on a report that does not Validate. Unknown
// fields are ignored (a later v1 may add some).
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return ParseJSON(b)
}

// ParseJSON is ReadJSON on bytes.
func ParseJSON(b []byte) (*Report, error) {
	var head struct {
		Schema *string `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("bench: not a JSON report: %w", err)
	}
	if head.Schema == nil {
		return nil, fmt.Errorf("bench: no schema field: not a detcoll benchmark report")
	}
	if *head.Schema != SchemaV1 {
		return nil, fmt.Errorf("bench: schema %q, this version reads %q", *head.Schema, SchemaV1)
	}
	var r Report
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("bench: decoding report: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate checks that the report is well formed: the schema, every
// top-level field in range, every row complete and self-consistent, and
// all_rank_repeat_bitwise the AND of the rows. A well-formed report may
// still record failed checks (repeat_bitwise or oracle_bitwise false).
func (r *Report) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Schema != SchemaV1 {
		bad("schema %q, want %q", r.Schema, SchemaV1)
	}
	if r.DetcollVersion == "" {
		bad("detcoll_version is empty")
	}
	if r.GitCommit == "" {
		bad("git_commit is empty (use \"unknown\")")
	}
	if _, err := time.Parse(time.RFC3339, r.StartedAt); err != nil {
		bad("started_at %q is not RFC 3339", r.StartedAt)
	}
	if r.WorldSize < 1 || r.Nodes < 1 || r.Nodes > r.WorldSize {
		bad("world_size %d, nodes %d", r.WorldSize, r.Nodes)
	}
	if r.Device.Kind == "" || r.Backend == "" {
		bad("device.kind %q, backend %q: both required", r.Device.Kind, r.Backend)
	}
	if r.Contract.Version == "" || r.Contract.Tree == "" || r.Contract.Accumulate == "" {
		bad("contract %+v is incomplete", r.Contract)
	}
	if r.Warmup < 0 || r.Iterations < 1 || r.Samples < 1 {
		bad("warmup %d, iterations %d, samples %d", r.Warmup, r.Iterations, r.Samples)
	}
	if len(r.Rows) == 0 {
		bad("no rows")
	}
	all := true
	for i, row := range r.Rows {
		all = all && row.RepeatBitwise
		if err := row.validate(r.Samples); err != nil {
			bad("row %d (%s %s %s %d B): %v", i, row.Operation, row.DType, row.Algorithm, row.InputBytes, err)
		}
	}
	if len(r.Rows) > 0 && all != r.AllRankRepeatBitwise {
		bad("all_rank_repeat_bitwise %v, but the AND of the rows is %v", r.AllRankRepeatBitwise, all)
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: invalid report: %w", errors.Join(errs...))
	}
	return nil
}

func (row Row) validate(samples int) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !row.Operation.Valid() {
		bad("operation %q", row.Operation)
	}
	dt, err := dtype.Parse(row.DType)
	if err != nil || !dt.Valid() {
		bad("dtype %q", row.DType)
	}
	if row.Algorithm == "" {
		bad("algorithm is empty")
	}
	if row.RequestedSizeBytes <= 0 || row.InputBytes <= 0 {
		bad("requested_size_bytes %d, input_bytes %d", row.RequestedSizeBytes, row.InputBytes)
	} else if err == nil && row.InputBytes%int64(dt.Size()) != 0 {
		bad("input_bytes %d is not whole %v elements", row.InputBytes, dt)
	}
	for _, t := range []struct {
		name string
		t    Timing
	}{{"deterministic", row.Deterministic}, {"native", row.Native}} {
		if len(t.t.SamplesUS) != samples {
			bad("%s has %d samples, want %d", t.name, len(t.t.SamplesUS), samples)
		}
		if !(t.t.MinUS >= 0 && t.t.MinUS <= t.t.MedianUS && t.t.MedianUS <= t.t.MaxUS) {
			bad("%s: min %g, median %g, max %g out of order", t.name, t.t.MinUS, t.t.MedianUS, t.t.MaxUS)
		}
	}
	for _, v := range []struct {
		name string
		v    float64
	}{{"latency_ratio_vs_native", row.LatencyRatioVsNative}, {"input_gbps", row.InputGBps},
		{"native_input_gbps", row.NativeInputGBps}, {"bus_gbps", row.BusGBps}, {"native_bus_gbps", row.NativeBusGBps}} {
		if !(v.v >= 0) || math.IsInf(v.v, 0) {
			bad("%s = %g", v.name, v.v)
		}
	}
	if row.NativeBest != "" && row.NativeBest != "default" && row.NativeBest != "symmetric" {
		bad("native_best %q", row.NativeBest)
	}
	if row.NativeBest == "symmetric" && row.NativeSymmetric == nil {
		bad("native_best symmetric without native_symmetric")
	}
	if !(float64(row.MaxAbsVsNative) >= 0) {
		bad("max_abs_vs_native = %g", float64(row.MaxAbsVsNative))
	}
	if row.WorkspaceBytes < 0 || row.PeakAllocatedBytes < 0 || row.NativePeakAllocatedBytes < 0 {
		bad("negative memory figures")
	}
	return errors.Join(errs...)
}
