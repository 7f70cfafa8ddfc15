package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress reports the rows done. On a terminal it draws a progress bar
// (progressbar/v3); on anything else (a file, a pipe, a CI log) it prints a
// plain line such as "bench: 5/24 rows" at most every MinInterval, and
// always the first and the last. Callers pass os.Stderr, so that the report
// on stdout stays clean. Update matches Run's progress callback. A Progress
// is safe for concurrent use.
type Progress struct {
	// MinInterval is the least time between two plain lines (default 2 s).
	MinInterval time.Duration

	mu       sync.Mutex
	w        io.Writer
	bar      *progressbar.ProgressBar
	total    int
	last     time.Time
	lastDone int
	done     int
	started  time.Time
	finished bool
}

// NewProgress returns a Progress writing to w for total rows (Update may
// change the total).
func NewProgress(w io.Writer, total int) *Progress {
	return newProgress(w, total, isTerminal(w))
}

// NewProgressBar is NewProgress that draws the bar whatever w is: for a w
// that reaches a terminal through someone else, as rank 0's stderr does
// under `detcoll launch` on a terminal (launch.EnvConsoleTTY).
func NewProgressBar(w io.Writer, total int) *Progress {
	return newProgress(w, total, true)
}

func newProgress(w io.Writer, total int, bar bool) *Progress {
	p := &Progress{MinInterval: 2 * time.Second, w: w, total: total, lastDone: -1, started: time.Now()}
	if bar {
		p.bar = progressbar.NewOptions(max(total, 1),
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription("bench"),
			progressbar.OptionSetItsString("rows"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	return p
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool { return isTerminal(w) }

// Clear erases the bar (before other output goes to its terminal); Redraw
// draws it again. Both do nothing without a bar.
func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !p.finished {
		p.bar.Clear()
	}
}

// Redraw draws the bar again after Clear.
func (p *Progress) Redraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil && !p.finished {
		p.bar.RenderBlank()
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// Update records that done of total rows are finished.
func (p *Progress) Update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.done = done
	if total > 0 && total != p.total {
		p.total = total
		if p.bar != nil {
			p.bar.ChangeMax(total)
		}
	}
	if p.bar != nil {
		p.bar.Set(done)
		if done >= p.total {
			p.bar.Finish()
			p.finished = true
		}
		return
	}
	now := time.Now()
	final := done >= p.total
	if done == p.lastDone || (!final && p.lastDone >= 0 && now.Sub(p.last) < p.MinInterval) {
		return
	}
	p.last, p.lastDone = now, done
	fmt.Fprintf(p.w, "bench: %d/%d rows (%s)\n", done, p.total, now.Sub(p.started).Round(time.Millisecond))
	if final {
		p.finished = true
	}
}

// Finish ends the bar, or prints where the run stopped if Update never
// reported the last row (an error). It is idempotent.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	if p.bar != nil {
		p.bar.Finish()
		return
	}
	fmt.Fprintf(p.w, "bench: stopped after %d/%d rows\n", p.done, p.total)
}
