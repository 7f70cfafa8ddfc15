package gpuattn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devcomm"
	"github.com/detcoll/detcoll/parallel"
)

// hostOps emulates a device on the host: fake addresses over Go slices,
// the row gather in Go, and the collectives of detcoll's host communicator
// (nil at CP = 1).
type hostOps struct {
	comm *detcoll.Comm
	next DevicePtr
	mem  map[DevicePtr][]byte
}

func newHostOps(c *detcoll.Comm) *hostOps {
	return &hostOps{comm: c, next: 1 << 20, mem: map[DevicePtr][]byte{}}
}

func (o *hostOps) rank() int {
	if o.comm == nil {
		return 0
	}
	return o.comm.Rank()
}

func (o *hostOps) size() int {
	if o.comm == nil {
		return 1
	}
	return o.comm.Size()
}

func (o *hostOps) alloc(n int) (DevicePtr, error) {
	p := o.next
	o.next += DevicePtr((n+255)/256*256 + 256)
	o.mem[p] = make([]byte, n)
	return p, nil
}

func (o *hostOps) free(p DevicePtr) error {
	if _, ok := o.mem[p]; !ok {
		return fmt.Errorf("free of %#x, not an allocation", p)
	}
	delete(o.mem, p)
	return nil
}

// at is n bytes at p, inside one allocation.
func (o *hostOps) at(p DevicePtr, n int) ([]byte, error) {
	for base, b := range o.mem {
		if p >= base && int(p-base)+n <= len(b) {
			return b[p-base : int(p-base)+n], nil
		}
	}
	return nil, fmt.Errorf("%d bytes at %#x are outside every allocation", n, p)
}

func (o *hostOps) upload(dst DevicePtr, src []byte) error {
	b, err := o.at(dst, len(src))
	if err == nil {
		copy(b, src)
	}
	return err
}

func (o *hostOps) download(dst []byte, src DevicePtr) error {
	b, err := o.at(src, len(dst))
	if err == nil {
		copy(dst, b)
	}
	return err
}

func (o *hostOps) gatherRows(dst, src, idx DevicePtr, rows, rowBytes int) error {
	d, err := o.at(dst, rows*rowBytes)
	if err != nil {
		return err
	}
	ib, err := o.at(idx, 4*rows)
	if err != nil {
		return err
	}
	for i := 0; i < rows; i++ {
		r := int(int32(uint32(ib[4*i]) | uint32(ib[4*i+1])<<8 | uint32(ib[4*i+2])<<16 | uint32(ib[4*i+3])<<24))
		s, err := o.at(src.Add(r*rowBytes), rowBytes)
		if err != nil {
			return err
		}
		copy(d[i*rowBytes:], s)
	}
	return nil
}

func (o *hostOps) bufs(bs []devcomm.Buffer) ([][]byte, error) {
	out := make([][]byte, len(bs))
	for i, b := range bs {
		s, err := o.at(b.Ptr, b.Bytes)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func (o *hostOps) allGatherBytes(ctx context.Context, sends, recvs []devcomm.Buffer, counts []int) error {
	s, err := o.bufs(sends)
	if err != nil {
		return err
	}
	r, err := o.bufs(recvs)
	if err != nil {
		return err
	}
	for l := range counts {
		if len(s[l]) != counts[l] || len(r[l]) != o.size()*counts[l] {
			return fmt.Errorf("lane %d: count %d for %d/%d bytes", l, counts[l], len(s[l]), len(r[l]))
		}
	}
	return o.comm.AllGatherMany(ctx, s, r, dtype.Byte)
}

func (o *hostOps) reduceScatterBF16(ctx context.Context, sends, recvs []devcomm.Buffer, counts []int) error {
	s, err := o.bufs(sends)
	if err != nil {
		return err
	}
	r, err := o.bufs(recvs)
	if err != nil {
		return err
	}
	for l := range counts {
		if len(r[l]) != 2*counts[l] || len(s[l]) != o.size()*2*counts[l] {
			return fmt.Errorf("lane %d: count %d for %d/%d bytes", l, counts[l], len(s[l]), len(r[l]))
		}
	}
	return o.comm.ReduceScatterMany(ctx, s, r, dtype.BF16, detcoll.WithAccumulate(detcoll.AccumulateNative))
}

// emuT collects one goroutine rank's errors; Fatalf ends the goroutine.
type emuT struct {
	t    *testing.T
	rank int
	mu   sync.Mutex
	errs []string
}

type rankStop struct{}

func (r *emuT) Helper() {}
func (r *emuT) Logf(format string, args ...any) {
	r.t.Logf("[emulated rank %d] %s", r.rank, fmt.Sprintf(format, args...))
}
func (r *emuT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *emuT) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(rankStop{})
}

// TestEmulatedCP runs the whole flow (the same code as the GPU test, with
// host ops and in-process host collectives) at CP = 2 (named as on CUDA,
// cuda_ag_rs) and 4 (named as on ROCm, rccl_ag_rs: the host reference then
// runs rccl_ag_rs on DeviceHost, and the report carries the name).
func TestEmulatedCP(t *testing.T) {
	for w, vendor := range map[int]string{2: "cuda", 4: "rocm"} {
		backend, err := BackendName(vendor)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("cp%d-%s", w, backend), func(t *testing.T) {
			comms, err := detcoll.NewInProc(w, detcoll.WithTimeout(2*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir := t.TempDir()
			ts := make([]*emuT, w)
			var wg sync.WaitGroup
			for r := 0; r < w; r++ {
				ts[r] = &emuT{t: t, rank: r}
				wg.Add(1)
				go func(r int) {
					defer wg.Done()
					defer func() {
						if p := recover(); p != nil {
							if _, ok := p.(rankStop); !ok {
								ts[r].Errorf("panic: %v", p)
							}
						}
					}()
					env := &testEnv{host: comms[r], w: w, rank: r, device: "host emulation", backend: backend,
						cpW: func() (ops, func() error, error) { return newHostOps(comms[r]), func() error { return nil }, nil },
						cp1: func() (ops, func() error, error) { return newHostOps(nil), func() error { return nil }, nil },
					}
					rep := runAll(ctx, ts[r], env, "TestEmulatedCP", dir, nil, "emulated")
					if !rep.Bitwise {
						ts[r].Errorf("not bitwise")
					}
					if rep.Backend != string(backend) || !strings.Contains(rep.markdown(), string(backend)+" attention") {
						ts[r].Errorf("report names backend %q, want %q", rep.Backend, backend)
					}
				}(r)
			}
			wg.Wait()
			for _, rt := range ts {
				for _, e := range rt.errs {
					t.Errorf("[rank %d] %s", rt.rank, e)
				}
			}
		})
	}
}

// The ag_rs backend is named after the collective library of the device's
// vendor, as package parallel names the host path.
func TestBackendName(t *testing.T) {
	for vendor, want := range map[string]parallel.Backend{"cuda": parallel.CUDAAgRs, "rocm": parallel.RCCLAgRs} {
		got, err := BackendName(vendor)
		if err != nil || got != want {
			t.Errorf("BackendName(%q) = %q, %v; want %q", vendor, got, err, want)
		}
		if !got.NeedsGPU() {
			t.Errorf("%s: parallel does not treat it as a GPU backend", got)
		}
	}
	for _, bad := range []string{"", "opencl", "CUDA"} {
		if got, err := BackendName(bad); err == nil {
			t.Errorf("BackendName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestLayout(t *testing.T) {
	// CP = 2, 4 tokens a rank: chunks of 2; rank 0 holds 0,1,6,7, rank 1 2,3,4,5.
	inv, order, mine, err := layout(2, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[0 1 6 7 2 3 4 5]" || fmt.Sprint(mine) != "[2 3 4 5]" || fmt.Sprint(inv) != "[0 1 4 5 6 7 2 3]" {
		t.Fatalf("order %v mine %v inv %v", order, mine, inv)
	}
	if _, _, mine, _ = layout(1, 0, 3); fmt.Sprint(mine) != "[0 1 2]" {
		t.Fatalf("CP = 1 rows %v", mine)
	}
	if b := negZeroBF16(4); fmt.Sprint(b) != "[0 128 0 128]" {
		t.Fatalf("-0 fill %v", b)
	}
}
