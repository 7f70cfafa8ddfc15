package detcoll

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// hostCPUs is the number of CPUs online on this host, the same on every rank
// of it whatever each rank's affinity: Auto's choice over a shared window
// depends on it, and ranks that chose differently would fail their calls
// with ErrMismatch. A variable for tests.
var hostCPUs = sync.OnceValue(func() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := countCPUList(string(b)); n > 0 {
			return n
		}
	}
	return runtime.NumCPU()
})

// maxCPUID bounds the CPU numbers countCPUList accepts (the kernel's
// NR_CPUS is at most 8192), so that no list can overflow the count.
const maxCPUID = 1 << 20

// countCPUList counts the CPUs of a kernel CPU list ("0-3,8-11\n"); 0 when
// it does not parse.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > maxCPUID {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b > maxCPUID {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
