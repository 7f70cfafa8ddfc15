package procstat

import (
	"os"
	"os/exec"
	"testing"
)

func TestStat(t *testing.T) {
	state, start, err := Stat(os.Getpid())
	if err != nil || start == 0 || (state != 'R' && state != 'S') {
		t.Fatalf("Stat(self) = %q, %d, %v; want running or sleeping, a start time", state, start, err)
	}
	c := exec.Command("sleep", "10")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	_, cstart, err := Stat(c.Process.Pid)
	if err != nil || cstart < start {
		t.Errorf("Stat(child) start %d, %v; want ≥ this process's %d", cstart, err, start)
	}
	c.Process.Kill()
	c.Wait()
	if _, _, err := Stat(c.Process.Pid); err == nil {
		t.Errorf("Stat of a reaped process: no error")
	}
}
