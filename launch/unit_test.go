package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{&WorkerError{ExitStatus: 3}, 3},
		{fmt.Errorf("wrapped: %w", &WorkerError{ExitStatus: 1}), 1},
		{&WorkerError{ExitStatus: -1, Signal: syscall.SIGKILL}, 137},
		{&WorkerError{ExitStatus: -1, Signal: syscall.SIGSEGV}, 139},
		{&InterruptedError{Signal: syscall.SIGTERM}, 143},
		{&InterruptedError{Signal: syscall.SIGINT}, 130},
		{&InterruptedError{Err: context.Canceled}, 130},
		{&InterruptedError{Err: context.DeadlineExceeded}, 124},
		{fmt.Errorf("launch: %w: x", ErrInvalidConfig), 2},
		{&StartError{Err: exec.ErrNotFound}, 127},
		{&StartError{Err: fmt.Errorf("fork/exec x: %w", syscall.EACCES)}, 126},
		{&StartError{Err: errors.New("other")}, 1},
		{&AbortError{Node: 1, Reason: "x"}, 1},
		{errors.New("store down"), 1},
	} {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// pump must prefix every line, terminate a partial last line, split long
// lines and never interleave two sources within a line.
func TestPump(t *testing.T) {
	var out bytes.Buffer
	dst := &lineWriter{w: &out}
	var tl tail
	r, w := io.Pipe()
	done := make(chan struct{})
	go func() { pump(r, []sink{{w: dst, prefix: "[rank 7] "}}, &tl); close(done) }()
	for _, s := range []string{"a", "b\nc", "\n", "", "\n\n", strings.Repeat("y", MaxLineLen), "z", "\npartial"} {
		w.Write([]byte(s))
	}
	w.Close()
	<-done
	want := "[rank 7] ab\n[rank 7] c\n[rank 7] \n[rank 7] \n[rank 7] " + strings.Repeat("y", MaxLineLen) + "\n[rank 7] z\n[rank 7] partial\n"
	if out.String() != want {
		t.Errorf("pump output = %.200q…, want %.200q…", out.String(), want)
	}
	got := tl.snapshot()
	if len(got) != 7 || got[0] != "ab" || got[6] != "partial" || len(got[4]) != maxTailLine+len("…") {
		t.Errorf("tail = %.100q", got)
	}
}

func TestPumpNoInterleaving(t *testing.T) {
	var out syncBuffer
	dst := &lineWriter{w: &out}
	var wg sync.WaitGroup
	for i := range 4 {
		r, w := io.Pipe()
		wg.Add(2)
		go func() { defer wg.Done(); pump(r, []sink{{w: dst, prefix: fmt.Sprintf("[rank %d] ", i)}}, &tail{}) }()
		go func() {
			defer wg.Done()
			line := strings.Repeat(fmt.Sprint(i), 1000) + "\n"
			for range 200 {
				w.Write([]byte(line[:300])) // lines arrive in pieces
				w.Write([]byte(line[300:]))
			}
			w.Close()
		}()
	}
	wg.Wait()
	lines := checkPrefixed(t, out.String(), 4)
	for i := range 4 {
		if len(lines[i]) != 200 {
			t.Fatalf("rank %d: %d lines", i, len(lines[i]))
		}
		for _, l := range lines[i] {
			if l != strings.Repeat(fmt.Sprint(i), 1000) {
				t.Fatalf("rank %d: mixed line %.50q", i, l)
			}
		}
	}
}

func TestTailRing(t *testing.T) {
	var tl tail
	for i := range 45 {
		tl.add([]byte(fmt.Sprintf("l%d\r\n", i)))
	}
	got := tl.snapshot()
	if len(got) != TailLines || got[0] != "l25" || got[TailLines-1] != "l44" {
		t.Errorf("snapshot = %q", got)
	}
}

func TestDestinationsShareLock(t *testing.T) {
	var b bytes.Buffer
	o, e := destinations(&b, &b)
	if o != e {
		t.Error("same writer should share one lineWriter")
	}
	o, e = destinations(&b, io.Discard)
	if o == e {
		t.Error("different writers share a lineWriter")
	}
	// Non-comparable writers must not panic.
	type sliceWriter struct {
		io.Writer
		_ []int
	}
	destinations(sliceWriter{Writer: &b}, sliceWriter{Writer: &b})
}
