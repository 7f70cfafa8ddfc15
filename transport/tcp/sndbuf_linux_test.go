package tcp

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/detcoll/detcoll/store"
)

// sndbuf is SO_SNDBUF of rank 0's connection to rank 1 (Linux reports
// twice what was set).
func sndbuf(t *testing.T, tr *Transport) int {
	t.Helper()
	rc, err := tr.peers[1].c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

// TestLoopbackWriteBuffer: loopback connections get LoopbackWriteBuffer
// unless Options.WriteBuffer or $DETCOLL_TCP_SNDBUF say otherwise; 0 in
// the environment and a negative option keep the system's default; a value
// that is not a number fails Connect.
func TestLoopbackWriteBuffer(t *testing.T) {
	group := func(opt Options) *Transport {
		ts := connectGroup(t, store.NewMemory(), uniquePrefix("sndbuf"), 2, opt)
		t.Cleanup(func() { closeAll(ts) })
		return ts[0]
	}
	t.Setenv(EnvWriteBuffer, "")
	if got := sndbuf(t, group(Options{})); got != 2*LoopbackWriteBuffer {
		t.Fatalf("default SO_SNDBUF on loopback = %d, want %d", got, 2*LoopbackWriteBuffer)
	}
	system := sndbuf(t, group(Options{WriteBuffer: -1}))
	if system == 2*LoopbackWriteBuffer {
		t.Fatalf("WriteBuffer -1: SO_SNDBUF %d is the loopback rule's, want the system's default", system)
	}
	if got := sndbuf(t, group(Options{WriteBuffer: 100 << 10})); got != 200<<10 {
		t.Fatalf("WriteBuffer 100 KiB: SO_SNDBUF = %d, want %d", got, 200<<10)
	}
	t.Setenv(EnvWriteBuffer, "0")
	if got := sndbuf(t, group(Options{})); got != system {
		t.Fatalf("%s=0: SO_SNDBUF = %d, want the system's default %d", EnvWriteBuffer, got, system)
	}
	t.Setenv(EnvWriteBuffer, "131072")
	if got := sndbuf(t, group(Options{})); got != 2*131072 {
		t.Fatalf("%s=131072: SO_SNDBUF = %d, want %d", EnvWriteBuffer, got, 2*131072)
	}
	if got := sndbuf(t, group(Options{WriteBuffer: 100 << 10})); got != 200<<10 {
		t.Fatalf("the option must win over %s: SO_SNDBUF = %d", EnvWriteBuffer, got)
	}
	for _, bad := range []string{"x", "-1", "1.5"} {
		t.Setenv(EnvWriteBuffer, bad)
		tr, err := Connect(context.Background(), store.NewMemory(), uniquePrefix("sndbuf"), 0, 1, Options{})
		if err == nil {
			tr.Close()
		}
		if err == nil || !strings.Contains(err.Error(), EnvWriteBuffer) {
			t.Fatalf("%s=%q: want an error naming the variable, got %v", EnvWriteBuffer, bad, err)
		}
	}
}
