//go:build cgo

package hiprt

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding/gpurt"

	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/hip"
	"github.com/detcoll/detcoll/internal/rccl"
)

// hiprt against the stand-in HIP runtime of internal/hip's tests (a ROCm 6
// runtime with two MI300X-like devices, built with the host C compiler, that
// logs the calls that matter): every devrt call the device code makes on
// AMD — properties, alloc, copies, streams, events, modules, launches, IPC,
// pinned host memory, versions — reaches the right HIP entry point with the
// right arguments. The C source is the constant fakeHIP of
// internal/hip/fake_cgo_test.go, read from that file (one fake for both
// packages). No AMD GPU is involved.

const fakeChildEnv = "DETCOLL_FAKE_HIPRT_CHILD"

// fakeHIPSource extracts the constant fakeHIP from internal/hip's test.
func fakeHIPSource(t *testing.T) string {
	t.Helper()
	path := filepath.Join("..", "..", "..", "internal", "hip", "fake_cgo_test.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("reading the stand-in HIP runtime of internal/hip: %v", err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if len(v.Names) == 1 && v.Names[0].Name == "fakeHIP" && len(v.Values) == 1 {
				if lit, ok := v.Values[0].(*ast.BasicLit); ok {
					src, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					return src
				}
			}
		}
	}
	t.Fatalf("%s has no string constant fakeHIP (the stand-in runtime moved: update this test)", path)
	return ""
}

func TestFakeRuntime(t *testing.T) {
	if os.Getenv(fakeChildEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	lib := bindingtest.Build(t, dir, "libamdhip64-fake.so.6", "HIP runtime", fakeHIPSource(t))
	log := filepath.Join(dir, "calls.log")
	bindingtest.RunChild(t, "TestFakeRuntimeChild", hip.LibraryEnv+"="+lib, "DETCOLL_FAKE_HIP_LOG="+log, fakeChildEnv+"=1",
		rccl.LibraryEnv+"="+filepath.Join(dir, "no-librccl.so.1"))
	want := []string{
		"malloc 1 256", "stream 1", // Do made device 1 current; StreamCreate is non-blocking
		"dtoda 5001",
		"record e002 5001", "wait 5001 e002 0", // EventCreate(false) disables timing
		"load \x7fELF",
		"launch 46 3 1 1 64 1 1 0 5001 deadbeef00 -7 1099511627776",
		"ipcopen 1", "ipcclose", // lazy peer access
		"streamdestroy 5001", "free",
	}
	bindingtest.WantCalls(t, log, want)
}

func TestFakeRuntimeChild(t *testing.T) {
	if os.Getenv(fakeChildEnv) == "" {
		t.Skip("run by TestFakeRuntime with a stand-in runtime")
	}
	r, err := devrt.Get("rocm")
	if err != nil || r != Runtime || r.Vendor() != "rocm" || r.CCLName() != "RCCL" || r.CompilerName() != "hiprtc" {
		t.Fatalf("devrt.Get(rocm) = %v, %v", r, err)
	}
	if err := r.DriverAvailable(); err != nil {
		t.Fatal(err)
	}
	if err := r.CCLAvailable(); err == nil {
		t.Fatal("CCLAvailable without RCCL")
	}
	if err := r.Available(); err == nil || (!strings.Contains(err.Error(), "rccl") && !strings.Contains(err.Error(), "hiprtc")) {
		t.Fatalf("Available without RCCL: %v", err)
	}
	if d, rv := Versions(); d != "6.4.43483" || rv != "6.4.43483" {
		t.Fatalf("Versions = %q, %q", d, rv)
	}
	if n, err := r.DeviceCount(); n != 2 || err != nil {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	ctx, p, err := r.Open(1)
	if err != nil {
		t.Fatal(err)
	}
	want := devrt.Props{Name: "Fake Instinct 1", Arch: "gfx942:sramecc+:xnack-", Multiprocessors: 304, TotalMem: 192 << 30, WarpSize: 64}
	if p != want {
		t.Fatalf("props %+v, want %+v", p, want)
	}
	if id, err := ctx.PCIBusID(); err != nil || id != "0000:0d:00.0" {
		t.Fatalf("PCI bus id %q %v", id, err)
	}
	u, err := ctx.UUID()
	if err != nil || string(bytes.TrimRight(u[:], "\x00")) != "0000:0d:00.0" {
		t.Fatalf("UUID %q %v (the PCI bus id)", u, err)
	}
	if u0, err := r.DeviceUUID(0); err != nil || u0 == u {
		t.Fatalf("device 0 UUID %q %v, device 1 %q", u0, err, u)
	}
	if ok, err := ctx.CanAccessPeer(0); !ok || err != nil {
		t.Fatalf("CanAccessPeer %v %v", ok, err)
	}
	err = ctx.Do(func() error {
		if free, total, err := r.MemGetInfo(); err != nil || free != 1<<20 || total != 2<<20 {
			t.Errorf("MemGetInfo %d %d %v", free, total, err)
		}
		buf, err := r.MemAlloc(256)
		if err != nil {
			return err
		}
		s, err := r.StreamCreate()
		if err != nil {
			return err
		}
		src := []byte("deterministic collectives on ROCm")
		if err := r.MemcpyHtoD(buf, src); err != nil {
			return err
		}
		if err := r.SyncLegacy(); err != nil {
			return err
		}
		if err := r.MemcpyDtoDAsync(buf.Add(64), buf, len(src), s); err != nil {
			return err
		}
		if err := r.StreamSynchronize(s); err != nil {
			return err
		}
		if err := r.MemsetD8(buf.Add(128), 'x', 4); err != nil {
			return err
		}
		back := make([]byte, len(src))
		if err := r.MemcpyDtoH(back, buf.Add(64)); err != nil {
			return err
		}
		if string(back) != string(src) {
			t.Errorf("round trip %q", back)
		}
		if err := r.MemcpyDtoH(back[:4], buf.Add(128)); err != nil || string(back[:4]) != "xxxx" {
			t.Errorf("memset %q %v", back[:4], err)
		}
		e, err := r.EventCreate(false)
		if err != nil {
			return err
		}
		if err := r.EventRecord(e, s); err != nil {
			return err
		}
		if err := r.StreamWaitEvent(s, e); err != nil {
			return err
		}
		if err := r.EventSynchronize(e); err != nil {
			return err
		}
		timed, err := r.EventCreate(true)
		if err != nil || timed != 0xe000 {
			t.Errorf("timing event %x %v", timed, err)
		}
		if ms, err := r.EventElapsed(timed, timed); err != nil || ms != 1.25 {
			t.Errorf("elapsed %v %v", ms, err)
		}
		if err := r.EventDestroy(e); err != nil {
			return err
		}
		m, err := r.ModuleLoad([]byte("\x7fELF fake code object"))
		if err != nil {
			return err
		}
		if _, err := r.ModuleFunction(m, "nope"); !errors.Is(err, &hip.Error{Code: gpurt.ResultNotFound}) {
			t.Errorf("missing kernel: %v", err)
		}
		f, err := r.ModuleFunction(m, "k")
		if err != nil {
			return err
		}
		a := r.NewArgs()
		a.Ptr(0xdeadbeef00).I32(-7).I64(1 << 40)
		if err := r.Launch(f, devrt.Dim3{X: 3, Y: 1, Z: 1}, devrt.Dim3{X: 64, Y: 1, Z: 1}, 0, s, a); err != nil {
			return err
		}
		if err := r.Launch(f, devrt.Dim3{X: 1, Y: 1, Z: 1}, devrt.Dim3{X: 1, Y: 1, Z: 1}, 0, s, foreignArgs{a}); err == nil {
			t.Error("Launch took kernel arguments another runtime made")
		}
		if err := r.ModuleUnload(m); err != nil {
			return err
		}
		h, err := r.IpcGetMemHandle(buf)
		if err != nil {
			return err
		}
		q, err := r.IpcOpenMemHandle(h)
		if err != nil || q != buf {
			t.Errorf("IPC open %x (want %x) %v", q, buf, err)
		}
		if err := r.IpcCloseMemHandle(q); err != nil {
			return err
		}
		if _, err := r.IpcOpenMemHandle(devrt.IpcHandle{}); !errors.Is(err, &hip.Error{Code: gpurt.ResultInvalidHandle}) {
			t.Errorf("bad IPC handle: %v", err)
		}
		hm, err := r.HostAlloc(48)
		if err != nil || hm.Len() != 48 {
			t.Errorf("HostAlloc %d %v", hm.Len(), err)
		} else {
			copy(hm.Bytes, "pinned") // host-visible memory
			if err := r.HostFree(hm); err != nil {
				t.Errorf("HostFree: %v", err)
			}
		}
		if err := r.StreamDestroy(s); err != nil {
			return err
		}
		return r.MemFree(buf)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.Release(); err != nil {
		t.Fatal(err)
	}
}

// foreignArgs are kernel arguments another runtime made.
type foreignArgs struct{ devrt.Args }
