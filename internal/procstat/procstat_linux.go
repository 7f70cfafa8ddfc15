package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat returns pid's state letter (field 3 of /proc/PID/stat: R, S, T, Z, …)
// and its start time (field 22, clock ticks since boot). An error when there
// is no such process or the file does not parse.
func Stat(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')') // the command name may contain spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+2:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	return f[0][0], start, err
}
