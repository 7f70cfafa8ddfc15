package gpuattn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/parallel"
)

// The test flow shared by the GPU test (every rank of a launched job) and
// the emulated one (goroutine ranks, host ops): for each case, CP = W over
// the job against CP = 1 on each rank alone, and both against package
// parallel's host attention, comparing raw bytes.

type tlog interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

type testEnv struct {
	host    *detcoll.Comm
	w, rank int
	device  string
	backend parallel.Backend                  // the ag_rs name of the device path ("" = cuda_ag_rs)
	cpW     func() (ops, func() error, error) // CP = W over the job
	cp1     func() (ops, func() error, error) // CP = 1, this rank alone
}

type attnCase struct {
	Name    string `json:"name"`
	Seq     int    `json:"seq"`
	Heads   int    `json:"heads"`
	HeadDim int    `json:"head_dim"`
	Seed    uint64 `json:"seed"`
}

func cases(w int) []attnCase {
	return []attnCase{
		{Name: "seq256", Seq: 256, Heads: 2, HeadDim: 64, Seed: 1},
		// The shortest useful zigzag: 2·W chunks of 5 tokens (18 does not
		// split into 4 equal chunks at CP = 2).
		{Name: fmt.Sprintf("seq%d", 10*w), Seq: 10 * w, Heads: 2, HeadDim: 64, Seed: 2},
	}
}

// rankReport is one rank's comparisons for one case: tensor → number of
// differing bytes (0 = bitwise equal).
type rankReport struct {
	Rank         int            `json:"rank"`
	Device       string         `json:"device"`
	CPWvsCP1     map[string]int `json:"cpw_vs_cp1"`
	CPWvsHostCPW map[string]int `json:"cpw_vs_host_cpw"`
	CP1vsHostCP1 map[string]int `json:"cp1_vs_host_local_debug"`
	FullDigest   string         `json:"full_out_lse_sha256"`
	ShardDigest  map[string]string
	Error        string `json:"error,omitempty"`
}

type caseReport struct {
	Case      attnCase     `json:"case"`
	CP        int          `json:"cp"`
	Ranks     []rankReport `json:"ranks"`
	SameCores bool         `json:"every_rank_same_core_output"`
	Bitwise   bool         `json:"bitwise"`
}

var tensors = []string{"out", "lse", "dq", "dk", "dv"}

func fields(r *Result) [][]byte { return [][]byte{r.Out, r.LSE, r.DQ, r.DK, r.DV} }

func diffBytes(a, b []byte) int {
	if len(a) != len(b) {
		return max(len(a), len(b))
	}
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func compare(got, want [][]byte) map[string]int {
	m := map[string]int{}
	for i, name := range tensors {
		m[name] = diffBytes(got[i], want[i])
	}
	return m
}

func allZero(m map[string]int) bool {
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return len(m) == len(tensors)
}

func digest(b ...[]byte) string {
	h := sha256.New()
	for _, x := range b {
		h.Write(x)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// rowsOf gathers rows (rowBytes each) of b.
func rowsOf(b []byte, rows []int32, rowBytes int) []byte {
	out := make([]byte, 0, len(rows)*rowBytes)
	for _, r := range rows {
		out = append(out, b[int(r)*rowBytes:int(r+1)*rowBytes]...)
	}
	return out
}

// fullInputs are the whole sequence's bf16 Q, K, V, dOut (sequence order)
// and its positions, the same on every rank.
func fullInputs(c attnCase) (q, k, v, dout *parallel.Matrix, pos []int32) {
	rng := rand.New(rand.NewPCG(c.Seed, uint64(c.Seq)))
	width := c.Heads * c.HeadDim
	mk := func(scale float64) *parallel.Matrix {
		f := make([]float32, c.Seq*width)
		for i := range f {
			f[i] = float32(rng.NormFloat64() * scale)
		}
		m, _ := parallel.MatrixFromFloat32(dtype.BF16, c.Seq, width, f)
		return m
	}
	q, k, v, dout = mk(1), mk(1), mk(1), mk(0.5)
	for i := 0; i < c.Seq; i += 7 { // some -0 in the output gradient
		binary.LittleEndian.PutUint16(dout.Bytes()[2*i*width:], 0x8000)
	}
	pos = make([]int32, c.Seq)
	for i := range pos {
		pos[i] = int32(i)
	}
	return q, k, v, dout, pos
}

func runOn(ctx context.Context, open func() (ops, func() error, error), in Inputs, c attnCase, scale float32) (*Result, error) {
	o, closeFn, err := open()
	if err != nil {
		return nil, err
	}
	res, err := run(ctx, o, in, c.Heads, c.HeadDim, scale)
	if cerr := closeFn(); cerr != nil && err == nil {
		err = cerr
	}
	return res, err
}

// hostReference runs package parallel's host attention: the device path's
// ag_rs backend name (cuda_ag_rs or rccl_ag_rs) on DeviceHost over the host
// communicator (CP = W shards), or local_debug (host nil, the whole
// sequence).
func hostReference(ctx context.Context, host *detcoll.Comm, backend parallel.Backend, q, k, v, dout *parallel.Matrix, pos []int32, c attnCase, scale float32) ([][]byte, error) {
	if backend == "" {
		backend = parallel.CUDAAgRs
	}
	cfg := parallel.AttentionConfig{Backend: backend, Device: parallel.DeviceHost, DType: dtype.BF16, Heads: c.Heads, HeadDim: c.HeadDim, Scale: scale}
	if host == nil {
		cfg.Backend = parallel.LocalDebug
	}
	a, err := parallel.NewAttention(ctx, host, cfg)
	if err != nil {
		return nil, err
	}
	fwd, err := a.Forward(ctx, q, k, v, pos)
	if err != nil {
		return nil, err
	}
	g, err := a.Backward(ctx, dout, fwd)
	if err != nil {
		return nil, err
	}
	out := [][]byte{}
	for _, t := range []parallel.Tensor{fwd.Out, fwd.LSE, g.Q, g.K, g.V} {
		m, ok := t.(*parallel.Matrix)
		if !ok {
			return nil, fmt.Errorf("host attention returned a %T", t)
		}
		out = append(out, m.Bytes())
	}
	return out, nil
}

// agree exchanges every rank's status: nil on every rank when all
// succeeded, else (on every rank) an error naming each failing rank.
func agree(ctx context.Context, c *detcoll.Comm, what string, err error) error {
	const slot = 2048
	mine := make([]byte, slot)
	if err != nil {
		mine[0] = 1
		copy(mine[1:slot-1], err.Error())
	}
	all := make([]byte, slot*c.Size())
	if gerr := c.AllGather(ctx, mine, all, dtype.Byte); gerr != nil {
		return fmt.Errorf("%s: exchanging the ranks' status: %w (this rank: %v)", what, gerr, err)
	}
	var msgs []string
	for r := 0; r < c.Size(); r++ {
		s := all[r*slot : (r+1)*slot]
		if s[0] == 1 {
			msg := s[1:]
			if i := bytes.IndexByte(msg, 0); i >= 0 {
				msg = msg[:i]
			}
			msgs = append(msgs, fmt.Sprintf("[rank %d] %s", r, msg))
		}
	}
	if msgs != nil {
		return fmt.Errorf("%s failed: %s", what, strings.Join(msgs, "; "))
	}
	return nil
}

// gatherReports gathers every rank's report (JSON, at most 64 KiB).
func gatherReports(ctx context.Context, c *detcoll.Comm, mine rankReport) ([]rankReport, error) {
	const slot = 64 << 10
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, err
	}
	if len(b) > slot-4 {
		return nil, fmt.Errorf("report of %d bytes", len(b))
	}
	buf := make([]byte, slot)
	binary.LittleEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	all := make([]byte, slot*c.Size())
	if err := c.AllGather(ctx, buf, all, dtype.Byte); err != nil {
		return nil, err
	}
	out := make([]rankReport, c.Size())
	for r := range out {
		s := all[r*slot:]
		n := binary.LittleEndian.Uint32(s)
		if n == 0 || int(n) > slot-4 {
			return nil, fmt.Errorf("rank %d sent no report", r)
		}
		if err := json.Unmarshal(s[4:4+n], &out[r]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkCase runs one case on every rank and returns the gathered report
// (the same on every rank); mismatches are reported through t.
func checkCase(ctx context.Context, t tlog, env *testEnv, c attnCase) caseReport {
	t.Helper()
	w, rank := env.w, env.rank
	width := c.Heads * c.HeadDim
	rowB := 2 * width
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	q, k, v, dout, pos := fullInputs(c)
	per := c.Seq / w
	_, _, mine, err := layout(w, rank, per)
	if err := agree(ctx, env.host, c.Name+": layout", err); err != nil {
		t.Fatalf("%v", err)
	}
	shard := func(m *parallel.Matrix) []byte { return rowsOf(m.Bytes(), mine, rowB) }
	myPos := make([]int32, per)
	for i, l := range mine {
		myPos[i] = pos[l]
	}
	inW := Inputs{Q: shard(q), K: shard(k), V: shard(v), DOut: shard(dout), Pos: myPos}
	in1 := Inputs{Q: q.Bytes(), K: k.Bytes(), V: v.Bytes(), DOut: dout.Bytes(), Pos: pos}

	resW, err := runOn(ctx, env.cpW, inW, c, scale)
	if err := agree(ctx, env.host, fmt.Sprintf("%s: CP = %d", c.Name, w), err); err != nil {
		t.Fatalf("%v", err)
	}
	res1, err := runOn(ctx, env.cp1, in1, c, scale)
	if err := agree(ctx, env.host, c.Name+": CP = 1", err); err != nil {
		t.Fatalf("%v", err)
	}
	// Host references: CP = W shards over the host communicator, and
	// local_debug on the whole sequence.
	mat := func(b []byte, rows int) *parallel.Matrix {
		m, _ := parallel.MatrixFromBytes(dtype.BF16, rows, width, b)
		return m
	}
	hostW, err := hostReference(ctx, env.host, env.backend, mat(inW.Q, per), mat(inW.K, per), mat(inW.V, per), mat(inW.DOut, per), myPos, c, scale)
	if err := agree(ctx, env.host, c.Name+": host parallel CP = W", err); err != nil {
		t.Fatalf("%v", err)
	}
	host1, err := hostReference(ctx, nil, "", q, k, v, dout, pos, c, scale)
	if err := agree(ctx, env.host, c.Name+": host parallel local_debug", err); err != nil {
		t.Fatalf("%v", err)
	}

	lseRowB := 4 * c.Heads
	want := [][]byte{rowsOf(res1.Out, mine, rowB), rowsOf(res1.LSE, mine, lseRowB),
		rowsOf(res1.DQ, mine, rowB), rowsOf(res1.DK, mine, rowB), rowsOf(res1.DV, mine, rowB)}
	rr := rankReport{Rank: rank, Device: env.device,
		CPWvsCP1:     compare(fields(resW), want),
		CPWvsHostCPW: compare(fields(resW), hostW),
		CP1vsHostCP1: compare(fields(res1), host1),
		FullDigest:   digest(resW.FullOut, resW.FullLSE),
		ShardDigest:  map[string]string{}}
	for i, name := range tensors {
		rr.ShardDigest[name] = digest(fields(resW)[i])
	}
	all, err := gatherReports(ctx, env.host, rr)
	if err := agree(ctx, env.host, c.Name+": gathering the reports", err); err != nil {
		t.Fatalf("%v", err)
	}
	rep := caseReport{Case: c, CP: w, Ranks: all, SameCores: true, Bitwise: true}
	for _, r := range all {
		if r.FullDigest != all[0].FullDigest {
			rep.SameCores = false
		}
		if !allZero(r.CPWvsCP1) || !allZero(r.CPWvsHostCPW) || !allZero(r.CP1vsHostCP1) {
			rep.Bitwise = false
		}
	}
	if !rep.SameCores {
		t.Errorf("%s: the ranks' whole core outputs differ (so slicing locally is not the root's scatter)", c.Name)
	}
	if !allZero(rr.CPWvsCP1) {
		t.Errorf("%s rank %d: CP = %d differs from CP = 1 (differing bytes %v)", c.Name, rank, w, rr.CPWvsCP1)
	}
	if !allZero(rr.CPWvsHostCPW) {
		t.Errorf("%s rank %d: CP = %d differs from the host parallel attention (differing bytes %v)", c.Name, rank, w, rr.CPWvsHostCPW)
	}
	if !allZero(rr.CP1vsHostCP1) {
		t.Errorf("%s rank %d: CP = 1 differs from local_debug (differing bytes %v)", c.Name, rank, rr.CP1vsHostCP1)
	}
	return rep
}

type report struct {
	Test      string            `json:"test"`
	CP        int               `json:"cp"`
	Backend   string            `json:"backend,omitempty"` // cuda_ag_rs or rccl_ag_rs
	Versions  map[string]string `json:"versions,omitempty"`
	Cases     []caseReport      `json:"cases"`
	Bitwise   bool              `json:"bitwise"`
	Timestamp string            `json:"timestamp"`
}

func (r report) markdown() string {
	var b strings.Builder
	name := r.Backend
	if name == "" {
		name = "ag_rs"
	}
	fmt.Fprintf(&b, "# gpuattn: CP = %d %s attention communication vs CP = 1\n\n", r.CP, name)
	fmt.Fprintf(&b, "%s. bf16; the core runs on the host (parallel.AttentionCore); the device path is the all-gathers, the reorder kernel, the local shard slice and the -0 reduce-scatter. Cells: differing bytes (0 = bitwise equal).\n\n", r.Timestamp)
	for k, v := range r.Versions {
		if v != "" {
			fmt.Fprintf(&b, "- %s: %s\n", k, v)
		}
	}
	b.WriteString("\n| case | rank | device | vs CP = 1 | vs host CP = W | CP = 1 vs local_debug | core sha256 |\n|---|---|---|---|---|---|---|\n")
	for _, c := range r.Cases {
		for _, rr := range c.Ranks {
			fmt.Fprintf(&b, "| %s (%d×%d×%d) | %d | %s | %s | %s | %s | %s |\n", c.Case.Name, c.Case.Seq, c.Case.Heads, c.Case.HeadDim,
				rr.Rank, rr.Device, cells(rr.CPWvsCP1), cells(rr.CPWvsHostCPW), cells(rr.CP1vsHostCP1), rr.FullDigest)
		}
	}
	fmt.Fprintf(&b, "\nBitwise: %v\n", r.Bitwise)
	return b.String()
}

func cells(m map[string]int) string {
	parts := make([]string, 0, len(tensors))
	for _, n := range tensors {
		parts = append(parts, fmt.Sprintf("%s %d", n, m[n]))
	}
	return strings.Join(parts, ", ")
}

func writeReport(dir string, r report) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := fmt.Sprintf("gpuattn-cp%d", r.CP)
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, base+".json"), j, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, base+".md"), []byte(r.markdown()), 0o644)
}

// runAll runs every case, prints the summary and (rank 0) writes the report.
func runAll(ctx context.Context, t tlog, env *testEnv, name, outDir string, versions map[string]string, stamp string) report {
	rep := report{Test: name, CP: env.w, Backend: string(env.backend), Versions: versions, Bitwise: true, Timestamp: stamp}
	for _, c := range cases(env.w) {
		cr := checkCase(ctx, t, env, c)
		rep.Cases = append(rep.Cases, cr)
		rep.Bitwise = rep.Bitwise && cr.Bitwise && cr.SameCores
		if env.rank == 0 {
			t.Logf("%s: CP = %d vs CP = 1 bitwise %v, every rank the same core %v", c.Name, env.w, cr.Bitwise, cr.SameCores)
		}
	}
	if env.rank == 0 {
		if err := writeReport(outDir, rep); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
	return rep
}
