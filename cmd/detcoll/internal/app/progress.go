package app

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/detcoll/detcoll/bench"
)

// envProgress tells rank 0 of a self-spawned run to report progress as
// machine-readable lines ("detcoll-progress DONE TOTAL") that the parent
// turns into a progress bar on its terminal.
const envProgress = "DETCOLL_PROGRESS_PROTOCOL"

const progressPrefix = "detcoll-progress "

// progressSink is where rank 0 reports rows done.
type progressSink interface {
	update(done, total int)
	finish()
}

type nopProgress struct{}

func (nopProgress) update(int, int) {}
func (nopProgress) finish()         {}

// protocolProgress writes the lines the parent's console parses.
type protocolProgress struct{ w io.Writer }

func (p protocolProgress) update(done, total int) {
	fmt.Fprintf(p.w, "%s%d %d\n", progressPrefix, done, total)
}
func (protocolProgress) finish() {}

// plainProgress is bench.Progress: a bar on a terminal, lines elsewhere.
// bar draws the bar on w even though w is not a terminal: under `detcoll
// launch` on a terminal, which draws rank 0's carriage-return updates in
// place (launch.EnvConsoleTTY).
type plainProgress struct {
	w   io.Writer
	bar bool
	p   *bench.Progress
}

func (p *plainProgress) update(done, total int) {
	if p.p == nil && p.bar {
		p.p = bench.NewProgressBar(p.w, total)
	} else if p.p == nil {
		p.p = bench.NewProgress(p.w, total)
	}
	p.p.Update(done, total)
}

func (p *plainProgress) finish() {
	if p.p != nil {
		p.p.Finish()
	}
}

// console is the terminal of a self-spawned run: the launcher's prefixed
// lines pass through, except rank 0's progress lines, which drive a bar
// (bench.Progress) on stderr when stderr is a terminal.
type console struct {
	mu       sync.Mutex
	out, err io.Writer
	bar      bool
	prog     *bench.Progress
}

func newConsole(out, err io.Writer) *console {
	return &console{out: out, err: err, bar: bench.IsTerminal(err)}
}

func (c *console) stdout() io.Writer { return &consoleWriter{c: c, dst: c.out} }
func (c *console) stderr() io.Writer { return &consoleWriter{c: c, dst: c.err} }

func (c *console) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prog != nil {
		c.prog.Finish()
	}
}

// line handles one whole line from a worker.
func (c *console) line(dst io.Writer, l []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rest, ok := bytes.CutPrefix(l, []byte("[rank 0] "+progressPrefix)); ok {
		f := strings.Fields(string(rest))
		if len(f) == 2 {
			done, e1 := strconv.Atoi(f[0])
			total, e2 := strconv.Atoi(f[1])
			if e1 == nil && e2 == nil {
				if c.prog == nil {
					c.prog = bench.NewProgress(c.err, total)
					c.prog.MinInterval = 2 * time.Second
				}
				c.prog.Update(done, total)
				return
			}
		}
	}
	if c.prog != nil {
		c.prog.Clear() // the line goes above the bar
	}
	dst.Write(l)
	if c.prog != nil {
		c.prog.Redraw()
	}
}

// consoleWriter splits what the launcher writes into lines.
type consoleWriter struct {
	c   *console
	dst io.Writer
	buf []byte
	mu  sync.Mutex
}

func (w *consoleWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.c.line(w.dst, w.buf[:i+1])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
