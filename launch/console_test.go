package launch

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// pumpStatus draws every carriage-return version of rank 0's line at once,
// unprefixed; other lines go above the bar (erase, line, redraw); the end
// of a bar line leaves its latest version as an ordinary prefixed line, and
// an erased bar leaves nothing. Log files get ordinary lines only.
func TestPumpStatus(t *testing.T) {
	var term, file syncBuffer
	st := &statusLine{w: &term}
	console := &lineWriter{w: &term, status: st}
	logFile := &lineWriter{w: &file}
	var tl tail
	r, w := io.Pipe()
	done := make(chan struct{})
	go func() {
		pumpStatus(r, []sink{{w: console, prefix: "[rank 0] "}, {w: logFile}}, &tl, st)
		close(done)
	}()
	step := func(s string, want string) {
		t.Helper()
		before := len(term.String())
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !strings.HasSuffix(term.String(), want) || len(term.String()) == before && want != "" {
			if time.Now().After(deadline) {
				t.Fatalf("after %q the terminal ends %q; want it to end %q", s, term.String()[before:], want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	step("plain line\n", "[rank 0] plain line\n")
	step("\rbar 1/3", eraseLine+"bar 1/3") // no newline yet: drawn at once
	step("\rbar 2/3", eraseLine+"bar 2/3")
	// Another rank's line while the bar stands.
	console.writeLine([]byte("[rank 1] hello\n"))
	if got := term.String(); !strings.HasSuffix(got, eraseLine+"bar 2/3"+eraseLine+"[rank 1] hello\nbar 2/3") {
		t.Fatalf("a line above the bar: terminal ends %q", got[max(0, len(got)-80):])
	}
	step("\rbar 3/3\n", eraseLine+"[rank 0] bar 3/3\n") // the bar's last version stays, as a line
	step("\rtemporary", eraseLine+"temporary")
	step("\r         \r", eraseLine) // erased by the program
	step("after\n", "[rank 0] after\n")
	step("crlf\r\n", "[rank 0] after\n[rank 0] crlf\n") // a CRLF line end: nothing drawn
	step("\rleft standing", eraseLine+"left standing")
	w.Close()
	<-done
	if got := term.String(); !strings.HasSuffix(got, eraseLine+"[rank 0] left standing\n") {
		t.Errorf("a bar left standing at EOF: terminal ends %q", got[max(0, len(got)-60):])
	}
	if strings.Contains(term.String(), "[rank 0] bar 1/3") || strings.Contains(term.String(), "[rank 0] temporary") {
		t.Errorf("intermediate versions became lines:\n%q", term.String())
	}
	wantFile := "plain line\nbar 3/3\nafter\ncrlf\nleft standing\n"
	if file.String() != wantFile {
		t.Errorf("log file = %q, want %q", file.String(), wantFile)
	}
	if got := strings.Join(tl.snapshot(), "|"); got != "plain line|bar 3/3|after|crlf|left standing" {
		t.Errorf("tail = %q", got)
	}
}

// The status line is cut to the terminal's width (less one column), by
// runes, so that it never wraps.
func TestStatusLineFitsWidth(t *testing.T) {
	var term syncBuffer
	st := &statusLine{w: &term, width: 6}
	st.set([]byte("█████████"))
	if got := term.String(); got != eraseLine+"█████" {
		t.Errorf("got %q", got)
	}
	st.set([]byte("█████████")) // the same: nothing written
	st.set(nil)
	if got := term.String(); got != eraseLine+"█████"+eraseLine {
		t.Errorf("got %q", got)
	}
}

// With a terminal on stderr, rank 0 (only) gets EnvConsoleTTY=1, its
// carriage-return updates are drawn unprefixed and the other ranks' lines
// go above them; without one, no worker gets it, even if inherited.
func TestRunConsoleTTY(t *testing.T) {
	// Marker files order the ranks: rank 1 speaks while step 1 stands.
	script := `echo "tty=${` + EnvConsoleTTY + `:-unset}"
wait_for() { i=0; while [ ! -e "$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; }
if [ "$RANK" = 0 ]; then
  printf '\rstep 1' >&2; touch "$MARKS/step1"; wait_for "$MARKS/hi"; sleep 0.1
  printf '\rstep 2' >&2; sleep 0.1; printf '\rdone\n' >&2
else
  wait_for "$MARKS/step1"; sleep 0.1; echo "rank $RANK says hi" >&2; touch "$MARKS/hi"
fi`
	for _, terminal := range []bool{true, false} {
		var out syncBuffer // stdout and stderr, as on one terminal
		cfg := Config{NprocPerNode: 2, Standalone: true, Cmd: []string{"/bin/sh", "-c", script},
			Env: append(os.Environ(), EnvConsoleTTY+"=1", "MARKS="+t.TempDir()), Stdout: &out, Stderr: &out, StderrTerminal: terminal}
		if err, _ := runWithin(t, context.Background(), cfg, 30*time.Second); err != nil {
			t.Fatalf("terminal %v: %v\n%s", terminal, err, out.String())
		}
		got := out.String()
		if terminal {
			for _, want := range []string{"[rank 0] tty=1\n", "[rank 1] tty=unset\n", eraseLine + "step 1",
				eraseLine + "[rank 1] rank 1 says hi\nstep 1" + eraseLine + "step 2", eraseLine + "[rank 0] done\n"} {
				if !strings.Contains(got, want) {
					t.Errorf("terminal: no %q in %q", want, got)
				}
			}
			continue
		}
		if !strings.Contains(got, "[rank 0] tty=unset\n") || !strings.Contains(got, "[rank 1] tty=unset\n") ||
			strings.Contains(got, eraseLine) || !strings.Contains(got, "[rank 0] \rstep 1\rstep 2\rdone\n") {
			t.Errorf("no terminal: %q", got)
		}
	}
}
