package devcomm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/internal/agree"
	"github.com/detcoll/detcoll/internal/cudaemu"
	"github.com/detcoll/detcoll/internal/gputest"
	"github.com/detcoll/detcoll/reduce"
)

// The peer-memory kernels run on the host too: kernels/ipc.cu is written as
// steps between __syncthreads, so the emulator below runs every block of
// every rank as an OS thread (the threads of a block one after another
// within a step), all ranks at once over shared "device" memory, with C++
// acquire/release atomics where the GPU uses system-scope ones. The same
// source, the same host plan (ipcGeom), the same protocol: sequence
// numbers, per-block flags, alternating halves, bounded waits. A lagging
// rank, interleaved operations and a dead peer are tested here on every
// machine; the GPU tests repeat the essentials on real NVLink.

const ipcEmuPrelude = `
#include <thread>
#include <ctime>
#define DC_HOST_EMU 1
#define DC_IPC_W 2
static void dc_emu_pause() { std::this_thread::yield(); }
static unsigned long long dc_emu_now_ns() {
	timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
`

// stdin (int64 little endian): W, ncoll, cap, timeout_ns, dead_rank,
// dead_coll, procs, dead_mode, then every rank's order of the collectives
// (W × ncoll indices), then every rank's call numbers (W × ncoll: the
// number its j-th call carries, a.call); per collective: op, tcode, nt, in_bytes, out_bytes,
// in_stride, out_stride, inplace, mis_in, mis_out, lag_rank, lag_us, sig,
// npieces, then per
// piece in_off, out_off, count, slot, base, grid; then the inputs (collective
// major, rank minor). stdout: the outputs in the same order, then each
// rank's first 8 host words (u32: the error word, the abort word and the
// mismatch record, ipcHost*).
const ipcEmuMain = `
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
typedef void (*blockfn)(const dc_ipc&, int, int, int);
static long long g_dead_mode = 0;  // 2: the dead rank's process exits in the middle of its collective
static int g_dead = -1;
static long long g_dead_coll = 0, g_cur = 0;  // per process: only with procs
template <class K> void run_block(const dc_ipc& a, int b, int g, int nt) {
	dc_ipc_blk s; s.seq = 0; s.stop = 0;
	for (int k = 0; k < K::STEPS; ++k) {
		for (int t = 0; t < nt; ++t) K::step(k, a, s, b, g, t, nt);
		if (g_dead_mode == 2 && a.rank == g_dead && g_cur >= g_dead_coll && k == 1) _exit(0);  // data pushed, nothing signalled
		if (s.stop) return;
	}
}
template <class T, int W> blockfn pick(long long op) {
	switch (op) {
	case 1: return run_block<dc_ipc_ar2<T, W> >;
	case 4: case 5: return run_block<dc_ipc_rsll<T, W> >;  // one-shot AllReduce: in_stride 0
	}
	return run_block<dc_ipc_rs<T, W> >;
}
template <class T> blockfn pickw(long long op, int w) {
	switch (w) {
	case 2: return pick<T, 2>(op); case 3: return pick<T, 3>(op); case 4: return pick<T, 4>(op);
	case 5: return pick<T, 5>(op); case 6: return pick<T, 6>(op); case 7: return pick<T, 7>(op);
	}
	return pick<T, 8>(op);
}
static blockfn pickfn(long long op, long long tc, int w) {
	if (op == 3) return run_block<dc_ipc_ag>;
	if (op == 6) return run_block<dc_ipc_agll>;
	switch (tc) {
	case 0: return pickw<dc_bf16_native>(op, w); case 1: return pickw<dc_bf16_f32>(op, w);
	case 2: return pickw<dc_fp16_native>(op, w); case 3: return pickw<dc_fp16_f32>(op, w);
	case 4: return pickw<dc_fp32>(op, w);
	}
	return pickw<dc_fp64>(op, w);
}
static long long rd() { long long v; if (fread(&v, 8, 1, stdin) != 1) { fprintf(stderr, "short input\n"); exit(2); } return v; }
// Shared anonymous memory, so that ranks can also be processes (fork).
static char* zalloc(long long n) {
	size_t sz = (size_t)((n + 4095) / 4096 * 4096 + 4096);
	void* p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) { perror("mmap"); exit(2); }
	return (char*)p;
}
struct piece { long long in_off, out_off, count, slot, base, grid; };
struct coll {
	long long op, tc, nt, in_bytes, out_bytes, in_stride, out_stride, inplace, mis_in, mis_out, lag_rank, lag_us, sig;
	std::vector<piece> pieces;
	std::vector<char*> in, out;
};
int main() {
	int w = (int)rd(); long long ncoll = rd(), cap = rd(), timeout = rd(), dead_rank = rd(), dead_coll = rd();
	long long procs = rd();  // ranks as processes (fork) instead of threads
	g_dead_mode = rd(); g_dead = (int)dead_rank; g_dead_coll = dead_coll;
	std::vector<std::vector<long long> > order(w, std::vector<long long>(ncoll)), calls(w, std::vector<long long>(ncoll));
	for (int r = 0; r < w; r++) for (long long k = 0; k < ncoll; k++) order[r][k] = rd();
	for (int r = 0; r < w; r++) for (long long k = 0; k < ncoll; k++) calls[r][k] = rd();
	std::vector<coll> cs(ncoll);
	for (auto& c : cs) {
		c.op = rd(); c.tc = rd(); c.nt = rd(); c.in_bytes = rd(); c.out_bytes = rd(); c.in_stride = rd(); c.out_stride = rd();
		c.inplace = rd(); c.mis_in = rd(); c.mis_out = rd(); c.lag_rank = rd(); c.lag_us = rd(); c.sig = rd();
		long long np = rd();
		for (long long i = 0; i < np; i++) { piece p; p.in_off = rd(); p.out_off = rd(); p.count = rd(); p.slot = rd(); p.base = rd(); p.grid = rd(); c.pieces.push_back(p); }
	}
	for (auto& c : cs) {
		for (int r = 0; r < w; r++) {
			char* out = zalloc(c.out_bytes + 64) + c.mis_out;
			memset(out, 0xA5, c.out_bytes);
			char* in;
			if (c.inplace && c.op == 3) in = out + r * c.out_stride;
			else if (c.inplace) in = out;
			else in = zalloc(c.in_bytes + 64) + c.mis_in;
			if (fread(in, 1, c.in_bytes, stdin) != (size_t)c.in_bytes) { fprintf(stderr, "short data\n"); return 2; }
			c.in.push_back(in); c.out.push_back(out);
		}
	}
	std::vector<char*> stage(w);
	for (int r = 0; r < w; r++) stage[r] = zalloc(DC_IPC_HDR + 2 * cap);
	unsigned* herr = (unsigned*)zalloc(64 * w);  // 16 words per rank, as ipcHostBytes
	unsigned* habort = (unsigned*)zalloc(4 * w);
	auto rank_main = [&](int r) {
		for (long long j = 0; j < ncoll; j++) {
			if (r == dead_rank && j >= dead_coll) {
				if (g_dead_mode == 1) _exit(0);  // the process exits between collectives
				if (g_dead_mode == 0) return;    // the rank stops calling
			}
			g_cur = j;
			coll& c = cs[order[r][j]];
			if (r == c.lag_rank && c.lag_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(c.lag_us));
			for (const piece& p : c.pieces) {
				dc_ipc a; memset(&a, 0, sizeof a);
				for (int q = 0; q < w; q++) a.stage[q] = stage[q];
				a.in = c.in[r] + p.in_off; a.out = c.out[r] + p.out_off;
				a.count = p.count; a.in_stride = c.in_stride; a.out_stride = c.out_stride;
				a.cap = cap; a.slot = p.slot; a.base = p.base; a.timeout_ns = timeout;
				a.herr = &herr[16 * r]; a.habort = &habort[r]; a.rank = r; a.w = w; a.sig = (unsigned)c.sig;
				a.call = (unsigned)calls[r][j];
				blockfn fn = pickfn(c.op, c.tc, w);
				std::vector<std::thread> blocks;
				for (int b = 0; b < (int)p.grid; b++) blocks.emplace_back([&, b]() { fn(a, b, (int)p.grid, (int)c.nt); });
				for (auto& t : blocks) t.join();
			}
		}
	};
	if (procs) {
		std::vector<pid_t> pids;
		fflush(stdout);
		for (int r = 0; r < w; r++) {
			pid_t pid = fork();
			if (pid < 0) { perror("fork"); return 2; }
			if (pid == 0) { rank_main(r); _exit(0); }
			pids.push_back(pid);
		}
		for (pid_t pid : pids) { int st; waitpid(pid, &st, 0); }
	} else {
		std::vector<std::thread> ranks;
		for (int r = 0; r < w; r++) ranks.emplace_back([&, r]() { rank_main(r); });
		for (auto& t : ranks) t.join();
	}
	for (auto& c : cs)
		for (int r = 0; r < w; r++) fwrite(c.out[r], 1, c.out_bytes, stdout);
	for (int r = 0; r < w; r++) fwrite(&herr[16 * r], 4, 8, stdout);
	return 0;
}
`

func buildIPCEmulator(t *testing.T) string {
	t.Helper()
	return cudaemu.Build(t, "ipc-emu", cudaemu.Shim+ipcEmuPrelude+gpu.ReduceSource+"\n"+fastSource+"\n"+ipcSource+ipcEmuMain)
}

// emuColl is one collective of an emulated run.
type emuColl struct {
	op      ipcOp
	dt      dtype.DType
	acc     detcoll.Accumulate
	count   int  // AR: count; RS: elements per block; AG: elements per rank
	inPlace bool // AR: send == recv; AG: send is the own block of recv
	misIn   int  // bytes added to the 256-aligned input address
	misOut  int
	lagRank int
	lagUS   int
	sig     uint32 // 0: derived from the collective (sigHash)
	in      [][]byte
}

type emuRun struct {
	procs     bool    // ranks as processes (fork) instead of threads
	deadMode  int     // 0: the dead rank stops calling; 1: its process exits between collectives; 2: in the middle of one
	order     [][]int // per rank, the order it calls the collectives (nil: 0, 1, …)
	calls     [][]int // per rank, the call number of its j-th call (nil: j+1, as the agreement numbers them)
	w         int
	geom      ipcGeom
	nt        int
	timeout   time.Duration
	deadRank  int
	deadColl  int
	colls     []*emuColl
	outs      [][][]byte // [coll][rank]
	errs      []uint32
	words     [][8]uint32 // per rank, the first host words (errs[r] is words[r][0])
	elapsed   time.Duration
	tcodeOf   map[[2]int]int
	launchLog []ipcPiece
}

// sigHash stands for the collective's folded signature hash (the same on
// every rank for the same collective), as ipcRun passes it.
func (c *emuColl) sigHash() uint32 {
	if c.sig != 0 {
		return c.sig
	}
	rec := signature{op: collOp(c.op) + 1, dt: uint8(c.dt), acc: uint8(c.acc), count: uint64(c.count)}.record()
	return agree.Fold32(agree.Hash(&rec))
}

func emuTCode(dt dtype.DType, acc detcoll.Accumulate) int {
	switch dt {
	case dtype.BF16:
		return int(acc)
	case dtype.FP16:
		return 2 + int(acc)
	case dtype.FP32:
		return 4
	}
	return 5
}

func (e *emuRun) run(t *testing.T, bin string) {
	t.Helper()
	var hdr bytes.Buffer
	put := func(v int) { binary.Write(&hdr, binary.LittleEndian, int64(v)) }
	put(e.w)
	put(len(e.colls))
	put(e.geom.capacity)
	put(int(e.timeout))
	put(e.deadRank)
	put(e.deadColl)
	put(map[bool]int{true: 1}[e.procs])
	put(e.deadMode)
	for r := 0; r < e.w; r++ {
		for k := range e.colls {
			if e.order != nil {
				put(e.order[r][k])
			} else {
				put(k)
			}
		}
	}
	for r := 0; r < e.w; r++ {
		for k := range e.colls {
			if e.calls != nil {
				put(e.calls[r][k])
			} else {
				put(k + 1)
			}
		}
	}
	var data bytes.Buffer
	for _, c := range e.colls {
		sz := c.dt.Size()
		var inB, outB, inStride, outStride, total int
		esz := sz
		switch c.op {
		case ipcAR1, ipcAR2, ipcAR1LL:
			inB, outB, total = c.count*sz, c.count*sz, c.count
		case ipcRS, ipcRSLL:
			inB, outB, inStride, total = e.w*c.count*sz, c.count*sz, c.count*sz, c.count
		case ipcAG, ipcAGLL:
			inB, outB, outStride, total, esz = c.count*sz, e.w*c.count*sz, c.count*sz, c.count*sz, 1
		}
		k := e.geom.pieces(c.op, esz, total)
		put(int(c.op))
		put(emuTCode(c.dt, c.acc))
		put(e.nt)
		put(inB)
		put(outB)
		put(inStride)
		put(outStride)
		put(map[bool]int{true: 1}[c.inPlace])
		put(c.misIn)
		put(c.misOut)
		put(c.lagRank)
		put(c.lagUS)
		put(int(c.sigHash()))
		put(k)
		for i := 0; i < k; i++ {
			p := e.geom.piece(c.op, esz, total, i)
			e.launchLog = append(e.launchLog, p)
			put(p.off * esz)
			put(p.off * esz)
			put(p.count)
			put(p.slot)
			put(p.base)
			put(p.grid)
		}
		for r := 0; r < e.w; r++ {
			if len(c.in[r]) != inB {
				t.Fatalf("input of %d bytes, want %d", len(c.in[r]), inB)
			}
			data.Write(c.in[r])
		}
	}
	cmd := exec.Command(bin)
	cmd.Stdin = io2(hdr.Bytes(), data.Bytes())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("IPC emulator: %v: %s", err, stderr.String())
	}
	e.elapsed = time.Since(start)
	res := stdout.Bytes()
	e.outs = make([][][]byte, len(e.colls))
	for i, c := range e.colls {
		n := c.count * c.dt.Size()
		if c.op == ipcAG || c.op == ipcAGLL {
			n *= e.w
		}
		e.outs[i] = make([][]byte, e.w)
		for r := 0; r < e.w; r++ {
			if len(res) < n {
				t.Fatalf("emulator output too short")
			}
			e.outs[i][r], res = res[:n], res[n:]
		}
	}
	if len(res) != 32*e.w {
		t.Fatalf("emulator output: %d bytes of host words, want %d", len(res), 32*e.w)
	}
	e.errs = make([]uint32, e.w)
	e.words = make([][8]uint32, e.w)
	for r := range e.errs {
		for i := range e.words[r] {
			e.words[r][i] = binary.LittleEndian.Uint32(res[32*r+4*i:])
		}
		e.errs[r] = e.words[r][0]
	}
}

func io2(a, b []byte) *bytes.Reader { return bytes.NewReader(append(append([]byte(nil), a...), b...)) }

// want is the oracle's output of collective c on rank r.
func (e *emuRun) want(t *testing.T, c *emuColl, r int) []byte {
	t.Helper()
	sz := c.dt.Size()
	switch c.op {
	case ipcAG, ipcAGLL:
		var out []byte
		for p := 0; p < e.w; p++ {
			out = append(out, c.in[p]...)
		}
		return out
	case ipcRS, ipcRSLL:
		blocks := make([][]byte, e.w)
		for p := range blocks {
			blocks[p] = c.in[p][r*c.count*sz : (r+1)*c.count*sz]
		}
		out := make([]byte, c.count*sz)
		if err := reduce.Oracle(c.dt, c.acc, blocks, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := make([]byte, c.count*sz)
	if err := reduce.Oracle(c.dt, c.acc, c.in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *emuRun) check(t *testing.T, label string) {
	t.Helper()
	for r, v := range e.errs {
		if v != 0 {
			t.Fatalf("%s: rank %d recorded IPC error %d", label, r, v)
		}
	}
	for i, c := range e.colls {
		for r := 0; r < e.w; r++ {
			want := e.want(t, c, r)
			got := e.outs[i][r]
			if !bytes.Equal(got, want) {
				j := 0
				for j < len(got) && got[j] == want[j] {
					j++
				}
				t.Fatalf("%s: collective %d (%v %v/%v count %d in place %v mis %d/%d) rank %d: byte %d differs: got %x want %x",
					label, i, c.op, c.dt, c.acc, c.count, c.inPlace, c.misIn, c.misOut, r, j, got[j], want[j])
			}
		}
	}
}

func emuInputs(op ipcOp, dt dtype.DType, w, count int, seed uint64) [][]byte {
	sz := dt.Size()
	n := count * sz
	if op == ipcRS || op == ipcRSLL {
		n *= w
	}
	in := make([][]byte, w)
	for r := range in {
		in[r] = make([]byte, n)
		gputest.FillInput(in[r], dt, seed, r)
		if r%2 == 1 && seed%2 == 0 { // cancellation: x + (-x)
			for i := 0; i+sz <= n; i += 3 * sz {
				copy(in[r][i:i+sz], in[r-1][i:i+sz])
				in[r][i+sz-1] ^= 0x80
			}
		}
	}
	return in
}

var emuModes = []struct {
	dt  dtype.DType
	acc detcoll.Accumulate
}{{dtype.BF16, detcoll.AccumulateNative}, {dtype.BF16, detcoll.AccumulateF32}, {dtype.FP16, detcoll.AccumulateNative},
	{dtype.FP16, detcoll.AccumulateF32}, {dtype.FP32, detcoll.AccumulateNative}, {dtype.FP64, detcoll.AccumulateNative}}

// TestIPCKernelsOnHost: every peer-memory kernel, for W = 2…8, every dtype
// and accumulate mode, counts 1, < W, prime and large enough to need
// several pieces and blocks, aligned, misaligned (scalar path) and in
// place, equals reduce.Oracle bit for bit on every rank — all collectives
// of one W in one run over the same staging buffers, so sequence numbers,
// halves and flags are exercised across operations.
func TestIPCKernelsOnHost(t *testing.T) {
	bin := buildIPCEmulator(t)
	counts := []int{1, 5, 1009, 2003}
	ws := []int{2, 3, 4, 5, 6, 7, 8}
	if testing.Short() {
		counts, ws = []int{5, 1009}, []int{2, 3, 8}
	}
	for _, w := range ws {
		e := &emuRun{w: w, nt: 32, timeout: 20 * time.Second, deadRank: -1,
			geom: ipcGeom{w: w, capacity: 8192, maxBlocks: 3, blockBytes: 1024}}
		seed := uint64(w) * 1000
		for _, m := range emuModes {
			for ci, count := range counts {
				for _, op := range []ipcOp{ipcAR1, ipcAR2, ipcRS, ipcAG, ipcAR1LL, ipcRSLL, ipcAGLL} {
					seed++
					c := &emuColl{op: op, dt: m.dt, acc: m.acc, count: count, lagRank: -1, in: emuInputs(op, m.dt, w, count, seed)}
					switch ci % 3 {
					case 1:
						c.misIn, c.misOut = m.dt.Size(), m.dt.Size()
					case 2:
						c.inPlace = op != ipcRS && op != ipcRSLL
					}
					e.colls = append(e.colls, c)
				}
			}
		}
		e.run(t, bin)
		e.check(t, fmt.Sprintf("W=%d", w))
		multi := 0
		for _, p := range e.launchLog {
			if p.grid > 1 {
				multi++
			}
		}
		if multi == 0 || len(e.launchLog) <= len(e.colls) {
			t.Fatalf("W=%d: the sweep never used several blocks (%d) or several pieces (%d launches for %d collectives)", w, multi, len(e.launchLog), len(e.colls))
		}
		t.Logf("W=%d: %d collectives, %d launches, %v", w, len(e.colls), len(e.launchLog), e.elapsed.Round(time.Millisecond))
	}
}

// TestIPCLaggingRankOnHost: interleaved operations of different kinds,
// sizes and dtypes, with a different rank sleeping before each, keep their
// order and their bits.
func TestIPCLaggingRankOnHost(t *testing.T) {
	bin := buildIPCEmulator(t)
	for _, w := range []int{3, 4} {
		e := &emuRun{w: w, nt: 16, timeout: 20 * time.Second, deadRank: -1,
			geom: ipcGeom{w: w, capacity: 4096, maxBlocks: 4, blockBytes: 512}}
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		for i := 0; i < 24; i++ {
			m := emuModes[rng.IntN(len(emuModes))]
			op := ipcOp(rng.IntN(7))
			count := 1 + rng.IntN(3000)
			c := &emuColl{op: op, dt: m.dt, acc: m.acc, count: count, lagRank: rng.IntN(w), lagUS: rng.IntN(3000),
				in: emuInputs(op, m.dt, w, count, uint64(100+i))}
			e.colls = append(e.colls, c)
		}
		e.run(t, bin)
		e.check(t, fmt.Sprintf("lagging W=%d", w))
	}
}

// TestIPCDeadPeerOnHost: a rank that stops calling makes every other rank
// record ErrIPCTimeout's code within about the timeout, and the later
// collectives return at once instead of waiting again.
func TestIPCDeadPeerOnHost(t *testing.T) {
	bin := buildIPCEmulator(t)
	const w = 4
	timeout := 300 * time.Millisecond
	e := &emuRun{w: w, nt: 16, timeout: timeout, deadRank: 2, deadColl: 1,
		geom: ipcGeom{w: w, capacity: 4096, maxBlocks: 2, blockBytes: 512}}
	for i := 0; i < 5; i++ {
		op := []ipcOp{ipcAR1LL, ipcAR2, ipcRS, ipcAGLL, ipcAR1}[i]
		e.colls = append(e.colls, &emuColl{op: op, dt: dtype.FP32, count: 700, lagRank: -1, in: emuInputs(op, dtype.FP32, w, 700, uint64(i))})
	}
	e.run(t, bin)
	for r, v := range e.errs {
		want := uint32(1)
		if r == e.deadRank {
			want = 0
		}
		if v != want {
			t.Fatalf("rank %d: error word %d, want %d (errors %v)", r, v, want, e.errs)
		}
	}
	// Collective 0 completed on every rank before the peer died.
	for r := 0; r < w; r++ {
		if !bytes.Equal(e.outs[0][r], e.want(t, e.colls[0], r)) {
			t.Fatalf("rank %d: the collective before the death is wrong", r)
		}
	}
	// One timeout per waiting block, not one per later collective.
	if e.elapsed > 6*timeout+2*time.Second {
		t.Fatalf("the run took %v with a %v timeout", e.elapsed, timeout)
	}
	t.Logf("dead peer: errors %v after %v (timeout %v)", e.errs, e.elapsed.Round(time.Millisecond), timeout)
}

// TestIPCPlan: the host plan of launches covers every element once, keeps
// every slot within a half, and gives 16-byte aligned piece offsets.
func TestIPCPlan(t *testing.T) {
	for _, w := range []int{2, 3, 5, 8} {
		for _, capacity := range []int{64 << 10, 1 << 20, 64 << 20} {
			g := ipcGeom{w: w, capacity: capacity, maxBlocks: 64, blockBytes: 64 << 10}
			for _, op := range []ipcOp{ipcAR1, ipcAR2, ipcRS, ipcAG, ipcAR1LL, ipcRSLL, ipcAGLL} {
				for _, sz := range []int{1, 2, 4, 8} {
					if (op == ipcAG || op == ipcAGLL) != (sz == 1) {
						continue
					}
					for _, total := range []int{1, 7, 1000003, 64 << 20 / sz} {
						k := g.pieces(op, sz, total)
						next := 0
						for i := 0; i < k; i++ {
							p := g.piece(op, sz, total, i)
							if p.off != next || p.count <= 0 {
								t.Fatalf("W=%d %v sz=%d total=%d piece %d: off %d count %d, want off %d", w, op, sz, total, i, p.off, p.count, next)
							}
							if (p.off*sz)%16 != 0 {
								t.Fatalf("%v piece %d at byte %d is not 16-byte aligned", op, i, p.off*sz)
							}
							slots := w - 1
							if op == ipcAR2 {
								slots = 2 * (w - 1)
							}
							area := g.llBase() // the LL area follows the main one
							if op.ll() {
								area = capacity - p.base
								if p.base != g.llBase() || 2*p.count*sz > p.slot {
									t.Fatalf("W=%d %v: LL piece of %d bytes at base %d in slots of %d", w, op, p.count*sz, p.base, p.slot)
								}
							}
							if slots*p.slot > area || p.slot%256 != 0 {
								t.Fatalf("W=%d %v: %d slots of %d bytes in an area of %d", w, op, slots, p.slot, area)
							}
							if p.grid < 1 || p.grid > ipcMaxB || (!op.ll() && p.grid > g.maxBlocks) {
								t.Fatalf("grid %d", p.grid)
							}
							next += p.count
						}
						if next != total {
							t.Fatalf("W=%d %v: pieces cover %d of %d", w, op, next, total)
						}
					}
				}
			}
		}
	}
	if len(ipcKernelNames()) != 20 {
		t.Fatalf("%d IPC kernels", len(ipcKernelNames()))
	}
	var a ipcArgs
	a.rank, a.w = 3, 8
	var b [ipcArgBytes]byte
	a.encode(b[:])
	if binary.LittleEndian.Uint32(b[152:]) != 3 || binary.LittleEndian.Uint32(b[156:]) != 8 {
		t.Fatal("dc_ipc layout: rank and w are not at bytes 152 and 156")
	}
}

// TestIPCDecide: the set-up records decide the peer-memory path the same
// way on every rank: one host, one process per rank, every rank able to
// export, and one configuration (else an error).
func TestIPCDecide(t *testing.T) {
	g := ipcGeom{w: 3, capacity: 1 << 20, maxBlocks: 8, blockBytes: 1 << 14, llBytes: 1 << 10, oneShot: 1 << 20}
	mk := func(host string, pid uint64, ok bool, g ipcGeom) []byte {
		r := make([]byte, ipcRecordBytes)
		if ok {
			r[0] = 1
		}
		copy(r[1:65], host)
		binary.LittleEndian.PutUint64(r[145:], pid)
		g.encode(r[153:])
		return r
	}
	join := func(rs ...[]byte) []byte { return bytes.Join(rs, nil) }
	g2 := g
	g2.maxBlocks = 9
	cases := []struct {
		name    string
		all     []byte
		why     string // substring; "" means the path is on
		invalid bool
	}{
		{"one host", join(mk("a", 1, true, g), mk("a", 2, true, g), mk("a", 3, true, g)), "", false},
		{"two hosts", join(mk("a", 1, true, g), mk("b", 2, true, g), mk("a", 3, true, g)), "more than one host", false},
		{"one process", join(mk("a", 1, true, g), mk("a", 2, true, g), mk("a", 1, true, g)), "ranks 0 and 2 share a process", false},
		{"export failed", join(mk("a", 1, true, g), mk("a", 2, false, g), mk("a", 3, true, g)), "rank 1 could not", false},
		{"configurations differ", join(mk("a", 1, true, g), mk("a", 2, true, g2), mk("a", 3, true, g)), "", true},
	}
	for _, c := range cases {
		why, err := ipcDecide(c.all)
		switch {
		case c.invalid:
			if !errors.Is(err, detcoll.ErrInvalidArgument) {
				t.Errorf("%s: got %q, %v; want ErrInvalidArgument", c.name, why, err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.why == "" && why != "":
			t.Errorf("%s: off (%s), want on", c.name, why)
		case c.why != "" && !strings.Contains(why, c.why):
			t.Errorf("%s: why %q, want %q", c.name, why, c.why)
		}
	}
}
