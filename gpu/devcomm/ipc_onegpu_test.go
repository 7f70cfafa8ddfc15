package devcomm

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/detcoll/detcoll/gpu"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/launch"
)

// TestGPUIPCKernelsOneGPU runs the peer-memory kernels for W = 2…8 on ONE
// GPU: W "ranks" are W streams of one process, each with its own staging
// buffer in device memory (mapped to every rank as is, no IPC handles
// needed), so the very kernels, protocol and host plan of the multi-GPU
// path run on real hardware at world sizes this project has no machine
// for, and every output is compared with the oracle bit for bit. Grids are
// kept small so that all ranks' blocks are resident at once (a rank's
// block waits for the same block of every other rank).
//
//	go test -c -o bin/devcomm.test ./gpu/devcomm
//	bin/devcomm.test -test.run GPUIPCKernelsOneGPU -test.v     # no launcher
func TestGPUIPCKernelsOneGPU(t *testing.T) {
	if launch.Launched(os.Getenv) {
		t.Skip("a one-GPU, one-process test: run it without a launcher")
	}
	rt, err := devrt.Get("")
	if err != nil {
		t.Skipf("no GPU runtime: %v", err)
	}
	if err := rt.Available(); err != nil {
		t.Skipf("no usable %s runtime: %v", rt.Vendor(), err)
	}
	dev, err := gpu.Open(0)
	must(t, err)
	defer dev.Close()
	counts := []int{1, 5, 1009, 2003, 70001}
	for w := 2; w <= ipcMaxW; w++ {
		g := ipcGeom{w: w, capacity: 1 << 20, maxBlocks: 8, blockBytes: 16 << 10, llBytes: AutoLLBytes, oneShot: AutoOneShotBytes}
		e := &emuRun{w: w, geom: g, timeout: 20 * time.Second, deadRank: -1}
		seed := uint64(w) * 7000
		for _, m := range emuModes {
			for ci, count := range counts {
				for _, op := range []ipcOp{ipcAR1, ipcAR2, ipcRS, ipcAG, ipcAR1LL, ipcRSLL, ipcAGLL} {
					if op.ll() && count*m.dt.Size() > g.llMax() {
						continue
					}
					seed++
					c := &emuColl{op: op, dt: m.dt, acc: m.acc, count: count, lagRank: -1, in: emuInputs(op, m.dt, w, count, seed)}
					if ci%2 == 1 {
						c.inPlace = op != ipcRS && op != ipcRSLL
					}
					e.colls = append(e.colls, c)
				}
			}
		}
		start := time.Now()
		runOneGPU(t, dev, e)
		e.check(t, fmt.Sprintf("one GPU, W=%d", w))
		t.Logf("W=%d: %d collectives, %d launches per rank, bit-identical to the oracle on every rank (%v)", w, len(e.colls), len(e.launchLog), time.Since(start).Round(time.Millisecond))
	}
}

// runOneGPU is emuRun.run on the GPU: rank r's launches go to stream r.
func runOneGPU(t *testing.T, dev *gpu.Device, e *emuRun) {
	t.Helper()
	w := e.w
	rt := dev.Runtime()
	prog, err := rt.Build(ipcProgram(w), "detcoll_ipc.cu", dev.Props())
	must(t, err)
	var (
		mod     devrt.Module
		streams = make([]Stream, w)
		ranks   = make([]*ipcState, w)
		stage   [ipcMaxW]DevicePtr
		host    devrt.HostMem
		allocs  []DevicePtr
	)
	alloc := func(n int) DevicePtr {
		p, err := dev.Alloc(max(n, 1) + 64)
		must(t, err)
		allocs = append(allocs, p)
		return p
	}
	defer func() {
		dev.Do(func() error {
			for _, s := range streams {
				if s != 0 {
					rt.StreamSynchronize(s)
					rt.StreamDestroy(s)
				}
			}
			for _, p := range allocs {
				rt.MemFree(p)
			}
			if mod != 0 {
				rt.ModuleUnload(mod)
			}
			if host.Len() > 0 {
				rt.HostFree(host)
			}
			return nil
		})
	}()
	must(t, dev.Do(func() (err error) {
		if mod, err = rt.ModuleLoad(prog.Image); err != nil {
			return err
		}
		host, err = rt.HostAlloc(ipcHostBytes * w)
		if err != nil {
			return err
		}
		clear(host.Bytes)
		for r := range streams {
			if streams[r], err = rt.StreamCreate(); err != nil {
				return err
			}
		}
		return nil
	}))
	fns := map[string]devrt.Function{}
	for _, name := range ipcKernelNames() {
		must(t, dev.Do(func() (err error) { fns[name], err = rt.ModuleFunction(mod, name); return err }))
	}
	for r := 0; r < w; r++ {
		stage[r] = alloc(IPCHeaderBytes + 2*e.geom.capacity)
		must(t, dev.Memset(stage[r], 0, IPCHeaderBytes+2*e.geom.capacity))
	}
	for r := 0; r < w; r++ {
		st := &ipcState{rt: rt, args: rt.NewArgs(), geom: e.geom, timeout: e.timeout, host: host, fns: fns, stage: stage}
		st.a = ipcArgs{stage: stage, capacity: int64(e.geom.capacity), timeoutNS: int64(e.timeout),
			herr: st.hostPtr(ipcHostBytes*r + ipcHostErr), habort: st.hostPtr(ipcHostBytes*r + ipcHostAbort), rank: int32(r), w: int32(w)}
		ranks[r] = st
	}
	type bufs struct{ in, out DevicePtr }
	all := make([][]bufs, len(e.colls))
	for i, c := range e.colls {
		sz := c.dt.Size()
		inB, outB, total, esz, inStride, outStride := c.count*sz, c.count*sz, c.count, sz, 0, 0
		switch c.op {
		case ipcRS, ipcRSLL:
			inB, inStride = w*c.count*sz, c.count*sz
		case ipcAG, ipcAGLL:
			outB, total, esz, outStride = w*c.count*sz, c.count*sz, 1, c.count*sz
		}
		all[i] = make([]bufs, w)
		for r := 0; r < w; r++ {
			b := bufs{out: alloc(outB)}
			must(t, dev.Memset(b.out, 0xA5, outB))
			switch {
			case c.inPlace && (c.op == ipcAG || c.op == ipcAGLL):
				b.in = b.out.Add(r * c.count * sz)
			case c.inPlace:
				b.in = b.out
			default:
				b.in = alloc(inB)
			}
			must(t, dev.CopyHtoD(b.in, c.in[r]))
			all[i][r] = b
		}
		k := e.geom.pieces(c.op, esz, total)
		for p := 0; p < k; p++ {
			pc := e.geom.piece(c.op, esz, total, p)
			e.launchLog = append(e.launchLog, pc)
			for r := 0; r < w; r++ {
				st := ranks[r]
				st.a.in, st.a.out = all[i][r].in.Add(pc.off*esz), all[i][r].out.Add(pc.off*esz)
				st.a.count, st.a.slot, st.a.base = int64(pc.count), int64(pc.slot), int64(pc.base)
				st.a.inStride, st.a.outStride = int64(inStride), int64(outStride)
				name := ipcKernelName(c.op, c.dt, c.acc)
				must(t, dev.Do(func() error { return st.launch(streams[r], name, pc.grid) }))
			}
		}
	}
	for r := 0; r < w; r++ {
		must(t, dev.Synchronize(streams[r]))
	}
	e.errs = make([]uint32, w)
	e.outs = make([][][]byte, len(e.colls))
	for r := 0; r < w; r++ {
		e.errs[r] = atomic.LoadUint32(ranks[r].word(ipcHostBytes*r + ipcHostErr))
	}
	for i, c := range e.colls {
		n := c.count * c.dt.Size()
		if c.op == ipcAG || c.op == ipcAGLL {
			n *= w
		}
		e.outs[i] = make([][]byte, w)
		for r := 0; r < w; r++ {
			e.outs[i][r] = make([]byte, n)
			must(t, dev.CopyDtoH(e.outs[i][r], all[i][r].out))
		}
	}
}
