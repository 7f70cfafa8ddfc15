package launch

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"sync"
)

// maxTailLine bounds one line kept for WorkerError.Tail.
const maxTailLine = 4 << 10

// lineWriter serialises whole lines onto one destination. Write errors are
// ignored: output keeps being drained so that workers never block on it.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) writeLine(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(b)
}

// destinations returns the line writers of stdout and stderr, one shared
// writer (and lock) if both are the same comparable value.
func destinations(stdout, stderr io.Writer) (out, err *lineWriter) {
	out = &lineWriter{w: stdout}
	if reflect.TypeOf(stdout) == reflect.TypeOf(stderr) && reflect.TypeOf(stdout).Comparable() && stdout == stderr {
		return out, out
	}
	return out, &lineWriter{w: stderr}
}

// tail keeps the last TailLines lines of one worker, both streams mixed in
// arrival order.
type tail struct {
	mu    sync.Mutex
	lines []string // ring
	next  int
}

func (t *tail) add(line []byte) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) > maxTailLine {
		line = append(line[:maxTailLine:maxTailLine], "…"...)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) < TailLines {
		t.lines = append(t.lines, string(line))
		return
	}
	t.lines[t.next] = string(line)
	t.next = (t.next + 1) % TailLines
}

func (t *tail) snapshot() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.lines))
	out = append(out, t.lines[t.next:]...)
	return append(out, t.lines[:t.next]...)
}

// pump copies r to dst line by line, each line prefixed and newline
// terminated, and records the lines in t. It returns at EOF or on a read
// error (as when the launcher closes r).
func pump(r io.Reader, dst *lineWriter, prefix string, t *tail) {
	br := bufio.NewReaderSize(r, MaxLineLen)
	buf := make([]byte, 0, 256)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			buf = append(buf[:0], prefix...)
			buf = append(buf, chunk...)
			if chunk[len(chunk)-1] != '\n' {
				buf = append(buf, '\n') // partial last line, or a long line split
			}
			dst.writeLine(buf)
			t.add(chunk)
			if cap(buf) > 4<<10 {
				buf = make([]byte, 0, 256) // do not pin one huge line's buffer
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
