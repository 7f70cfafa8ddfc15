package launch

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
)

// maxTailLine bounds one line kept for WorkerError.Tail.
const maxTailLine = 4 << 10

// lineWriter serialises whole lines onto one destination. Write errors are
// ignored: output keeps being drained so that workers never block on it.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	status *statusLine // when w reaches the terminal rank 0 draws on
}

func (l *lineWriter) writeLine(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.status != nil {
		l.status.above(l.w, b)
		return
	}
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
	fail  *Failure // the last FailureMarker line seen
}

// failure returns the worker's last FailureMarker line, parsed.
func (t *tail) failure() (Failure, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail == nil {
		return Failure{}, false
	}
	return *t.fail, true
}

func (t *tail) add(line []byte) {
	line = bytes.TrimRight(line, "\r\n")
	if bytes.Contains(line, []byte(FailureMarker)) {
		if f, ok := parseFailure(line); ok {
			t.mu.Lock()
			t.fail = &f
			t.mu.Unlock()
		}
	}
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

// sink is one destination of a worker stream: the console (with the rank
// prefix) or a log file (without).
type sink struct {
	w      *lineWriter
	prefix string
}

// pump copies r to every sink line by line, each line prefixed and newline
// terminated, and records the lines in t. It returns at EOF or on a read
// error (as when the launcher closes r).
func pump(r io.Reader, sinks []sink, t *tail) {
	br := bufio.NewReaderSize(r, MaxLineLen)
	buf := make([]byte, 0, 256)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			for _, s := range sinks {
				buf = append(buf[:0], s.prefix...)
				buf = append(buf, chunk...)
				if chunk[len(chunk)-1] != '\n' {
					buf = append(buf, '\n') // partial last line, or a long line split
				}
				s.w.writeLine(buf)
			}
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

// openLogRoot creates LogDir/RdzvID (or a temporary directory) when some
// stream goes to log files.
func (j *job) openLogRoot() error {
	c := &j.cfg
	if c.Redirects.empty() && c.Tee.empty() && c.LogDir == "" {
		return nil
	}
	dir := c.LogDir
	if dir == "" {
		d, err := os.MkdirTemp("", "detcoll-launch-")
		if err != nil {
			return fmt.Errorf("launch: log directory: %w", err)
		}
		dir = d
		fmt.Fprintf(c.Stderr, "detcoll launch: worker logs in %s\n", dir)
	}
	j.logRoot = filepath.Join(dir, c.RdzvID)
	if err := os.MkdirAll(j.logRoot, 0o755); err != nil {
		return fmt.Errorf("launch: log directory: %w", err)
	}
	return nil
}

func (s Streams) empty() bool {
	if s.All != StdNone {
		return false
	}
	for _, v := range s.PerRank {
		if v != StdNone {
			return false
		}
	}
	return true
}

// attemptDir is LogDir/RdzvID/attempt_N/LOCAL_RANK, as torchrun lays it
// out (without torchrun's random suffix, so that it can be found).
func (j *job) attemptDir(local int) string {
	return filepath.Join(j.logRoot, "attempt_"+strconv.Itoa(j.attempt), strconv.Itoa(local))
}

// openLogs opens the stdout and stderr log files of local rank local (nil
// for a stream that is neither redirected nor teed).
func (j *job) openLogs(local int) ([2]*os.File, error) {
	var files [2]*os.File
	if j.logRoot == "" {
		return files, nil
	}
	c := &j.cfg
	want := c.Redirects.For(local) | c.Tee.For(local)
	dir := j.attemptDir(local)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return files, err
	}
	for i, std := range []Std{StdOut, StdErr} {
		if want&std == 0 {
			continue
		}
		f, err := os.Create(filepath.Join(dir, []string{"stdout.log", "stderr.log"}[i]))
		if err != nil {
			if files[0] != nil {
				files[0].Close()
			}
			return [2]*os.File{}, err
		}
		files[i] = f
	}
	return files, nil
}
