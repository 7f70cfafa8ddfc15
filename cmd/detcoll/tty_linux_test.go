//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair (Linux's /dev/ptmx; golang.org/x/sys
// is already a dependency, so no pty module is needed) sized cols×24.
func openPTY(t *testing.T, cols int) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal on this machine (%v): the terminal side of the progress bar is untested here; TestRunConsoleTTY (launch) covers the forwarding", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		t.Fatalf("opening the pty's terminal: %v", err)
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: uint16(cols)}); err != nil {
		t.Fatalf("sizing the pty: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// benchUnderLaunch runs `detcoll launch --nproc-per-node 2 detcoll bench`
// with stdout to a pipe and stderr to stderr (a pty or a pipe); it returns
// both outputs.
func benchUnderLaunch(t *testing.T, bin string, stderr *os.File, readStderr func() string) (string, string) {
	t.Helper()
	args := append([]string{"launch", "--nproc-per-node", "2", bin, "bench", "--size-bytes", "4096,16384,65536", "--operations", "all_reduce",
		"--dtype", "fp32", "--output", ""}, quick...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), "TERM=xterm")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stderr.Close() // the launcher has its copy: EOF (EIO on a pty) once it exits
	err := cmd.Wait()
	got := readStderr()
	if ctx.Err() != nil || err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%q", args, err, out.String(), got)
	}
	return out.String(), got
}

// Under `detcoll launch` on a terminal, rank 0 of `detcoll bench` draws the
// progress bar: the terminal gets its carriage-return updates unprefixed
// (drawn by the launcher in place), not "[rank 0] bench: 1/3 rows" lines;
// without a terminal (a CI log), plain lines and no carriage return.
func TestBenchProgressBarUnderLaunch(t *testing.T) {
	bin := buildDetcoll(t)

	master, slave := openPTY(t, 100)
	var mu sync.Mutex
	var tty bytes.Buffer
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			tty.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return // EIO once every holder of the terminal closed it
			}
		}
	}()
	stdout, onTTY := benchUnderLaunch(t, bin, slave, func() string {
		select {
		case <-readDone:
		case <-time.After(10 * time.Second):
			t.Error("the pty did not reach EOF after the launcher exited")
		}
		mu.Lock()
		defer mu.Unlock()
		return tty.String()
	})
	if !strings.Contains(stdout, "[rank 0] all_reduce") {
		t.Errorf("no rows on stdout:\n%s", stdout)
	}
	// The bar: erase-line, then progressbar's "bench  N% |…| (d/6) […]"
	// (3 sizes × 2 algorithms), erased at the end.
	if !regexp.MustCompile(`\r\x1b\[Kbench +\d+% \|[ █]+\| \(\d/6\)`).MatchString(onTTY) || !strings.HasSuffix(onTTY, "\r\x1b[K") ||
		strings.Contains(onTTY, "[rank 0] bench") {
		t.Errorf("terminal: no progress bar drawn by rank 0 (or a prefixed one):\n%q", onTTY)
	}
	if strings.Contains(onTTY, "bench: 6/6 rows") {
		t.Errorf("terminal: plain progress lines instead of the bar:\n%q", onTTY)
	}
	for _, l := range strings.Split(onTTY, "\n") {
		// Every drawn version fits the 100 columns (less one).
		for _, v := range strings.Split(l, "\r") {
			if n := len([]rune(strings.TrimPrefix(v, "\x1b[K"))); n > 99 {
				t.Errorf("a %d-column line on a 100-column terminal: %q", n, v)
			}
		}
	}

	// The same without a terminal: plain lines, as in a CI log.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var plain bytes.Buffer
	copied := make(chan error, 1)
	go func() { _, err := plain.ReadFrom(r); copied <- err }()
	_, onPipe := benchUnderLaunch(t, bin, w, func() string {
		if err := <-copied; err != nil && !errors.Is(err, os.ErrClosed) {
			t.Error(err)
		}
		return plain.String()
	})
	if !strings.Contains(onPipe, "[rank 0] bench: 6/6 rows") || strings.Contains(onPipe, "\r") {
		t.Errorf("no terminal: want plain prefixed progress lines, no carriage return:\n%q", onPipe)
	}
}
