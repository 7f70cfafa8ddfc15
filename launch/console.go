package launch

import (
	"bytes"
	"io"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"
)

// EnvConsoleTTY is "1" in rank 0's environment when its stderr, a pipe to
// the launcher, ends on the launcher's terminal: the launcher then draws
// rank 0's carriage-return updates (a progress bar) in place, unprefixed,
// as soon as they come, and keeps them below the other ranks' lines. A
// worker may then draw a bar as if its stderr were a terminal
// (`detcoll bench` does). Never set otherwise (a CI log gets plain lines);
// an inherited value is removed.
const EnvConsoleTTY = "DETCOLL_CONSOLE_TTY"

// eraseLine moves to the start of the line and erases it (VT100 "erase to
// end of line", which every terminal emulator in use understands).
const eraseLine = "\r\x1b[K"

// statusLine is the last line of the launcher's terminal, which rank 0's
// carriage-return updates own. Every other line of output (any rank,
// stdout or stderr when they reach the same terminal) is written above it:
// erase it, write the line, draw it again, all under one lock, so that a
// bar never ends up in the middle of another rank's line.
type statusLine struct {
	mu    sync.Mutex
	w     io.Writer // the terminal
	width int       // its columns; 0 when unknown
	shown []byte    // what the status line shows now; empty for nothing
}

func newStatusLine(w io.Writer) *statusLine {
	s := &statusLine{w: w}
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil {
			s.width = cols
		}
	}
	return s
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// above writes line (whole, newline-terminated) to dst above the status
// line.
func (s *statusLine) above(dst io.Writer, line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.shown) > 0 {
		_, _ = io.WriteString(s.w, eraseLine)
	}
	_, _ = dst.Write(line)
	if len(s.shown) > 0 {
		_, _ = s.w.Write(s.shown)
	}
}

// set shows text as the status line (nil: erase it). Text wider than the
// terminal is cut, since a wrapped line could not be redrawn in place.
func (s *statusLine) set(text []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text = fitWidth(text, s.width)
	if bytes.Equal(text, s.shown) {
		return
	}
	buf := make([]byte, 0, len(eraseLine)+len(text))
	buf = append(buf, eraseLine...)
	buf = append(buf, text...)
	_, _ = s.w.Write(buf)
	s.shown = append(s.shown[:0], text...)
}

// fitWidth cuts text to width-1 runes (0: no limit), leaving the last
// column free so that the cursor never wraps.
func fitWidth(text []byte, width int) []byte {
	if width <= 1 || utf8.RuneCount(text) < width {
		return text
	}
	n, i := 0, 0
	for i < len(text) && n < width-1 {
		_, size := utf8.DecodeRune(text[i:])
		i += size
		n++
	}
	return text[:i]
}

// pumpStatus is pump for the stream whose carriage returns the launcher
// draws on its terminal (rank 0's stderr). A line that holds a carriage
// return is a status line: each "\r" starts a new version of it, and the
// latest version is shown on st as soon as it arrives, without the rank
// prefix. When such a line ends ("\n") its latest version is written as an
// ordinary line (prefixed, to every sink, into the tail), unless it is
// blank (the program erased it). A line without a carriage return is
// copied as pump copies it. Log-file sinks get ordinary lines only.
func pumpStatus(r io.Reader, sinks []sink, t *tail, st *statusLine) {
	buf := make([]byte, 32<<10)
	var (
		cur   []byte // the line (or its version) being written
		last  []byte // with hasCR: the previous version
		hasCR bool
	)
	reset := func() { cur, last, hasCR = cur[:0], last[:0], false }
	commit := func() {
		v := cur
		if hasCR {
			if len(v) == 0 {
				v = last
			}
			st.set(nil) // the line takes the status line's place
			if len(bytes.TrimSpace(v)) == 0 {
				reset()
				return
			}
		}
		line := append(v, '\n')
		for _, s := range sinks {
			out := make([]byte, 0, len(s.prefix)+len(line))
			out = append(append(out, s.prefix...), line...)
			s.w.writeLine(out)
		}
		t.add(line)
		reset()
	}
	for {
		n, err := r.Read(buf)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexAny(chunk, "\r\n")
			if i < 0 {
				cur = append(cur, chunk...)
				break
			}
			cur = append(cur, chunk[:i]...)
			if chunk[i] == '\n' {
				commit()
			} else {
				hasCR = true
				last, cur = append(last[:0], cur...), cur[:0]
			}
			chunk = chunk[i+1:]
		}
		if len(cur) >= MaxLineLen {
			commit() // as pump splits a long line
		}
		if hasCR {
			v := cur
			if len(v) == 0 {
				v = last
			}
			if len(bytes.TrimSpace(v)) == 0 {
				v = nil
			}
			st.set(v)
		}
		if err != nil {
			if len(cur) > 0 || hasCR {
				commit() // a partial last line, or a bar left standing
			}
			return
		}
	}
}
