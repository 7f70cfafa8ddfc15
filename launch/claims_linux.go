package launch

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/detcoll/detcoll/internal/procstat"
)

// Launchers that bind oversubscribed workers record which CPU each worker
// got in one file per host, so that concurrent jobs (a CI machine running
// tests side by side) spread over the CPUs instead of all starting at the
// first: each worker takes the CPU that live launchers' workers use least.
// A claim names its launcher's pid and start time, so a launcher that died
// without releasing its claims stops counting. Anything wrong with the file
// (another user's, unreadable, a line that does not parse) costs only the
// spreading: the workers are then bound round robin as if alone.

// claimsPath is the host's claims file: in /dev/shm where there is one (it
// is per boot), else in the temporary directory. A variable for tests.
var claimsPath = func() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm/detcoll-cpu-claims"
	}
	return filepath.Join(os.TempDir(), "detcoll-cpu-claims")
}

// cpuClaim is one worker's CPU, claimed by the launcher (pid, start) for
// its job (a random id: one process may run several jobs).
type cpuClaim struct {
	pid   int
	start uint64
	job   string
	cpu   int
}

func (c cpuClaim) String() string { return fmt.Sprintf("%d %d %s %d\n", c.pid, c.start, c.job, c.cpu) }

// claimer holds one job's claims.
type claimer struct {
	job   string
	start uint64
}

func newClaimer() *claimer {
	var b [8]byte
	rand.Read(b[:])
	start, _ := procStart(os.Getpid())
	return &claimer{job: hex.EncodeToString(b[:]), start: start}
}

// claim gives each of nproc workers one CPU of allowed, the least used by
// other live jobs' claims first (ties: the lower CPU, so a job alone is
// bound round robin), and records them, replacing this job's earlier
// claims.
func (cl *claimer) claim(allowed []int, nproc int) []int {
	out := make([]int, nproc)
	err := cl.update(func(others []cpuClaim) []cpuClaim {
		use := map[int]int{}
		for _, c := range others {
			use[c.cpu]++
		}
		mine := make([]cpuClaim, nproc)
		for l := range nproc {
			best := allowed[0]
			for _, c := range allowed[1:] {
				if use[c] < use[best] {
					best = c
				}
			}
			use[best]++
			out[l] = best
			mine[l] = cpuClaim{pid: os.Getpid(), start: cl.start, job: cl.job, cpu: best}
		}
		return append(others, mine...)
	})
	if err != nil {
		for l := range nproc {
			out[l] = workerCPUs(allowed, nproc, l)[0] // round robin, as if alone
		}
	}
	return out
}

// release removes this job's claims.
func (cl *claimer) release() {
	cl.update(func(others []cpuClaim) []cpuClaim { return others })
}

// update rewrites the claims file under an exclusive lock: f gets the live
// claims of other jobs and returns the claims to keep.
func (cl *claimer) update(f func(others []cpuClaim) []cpuClaim) error {
	fd, err := os.OpenFile(claimsPath(), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o666)
	if err != nil {
		return err
	}
	defer fd.Close()
	// Every user's launchers share the file: 0666 whatever the umask.
	if fi, err := fd.Stat(); err == nil && fi.Mode().Perm() != 0o666 {
		fd.Chmod(0o666)
	}
	if err := syscall.Flock(int(fd.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(fd.Fd()), syscall.LOCK_UN)
	var others []cpuClaim
	live := map[[2]uint64]bool{}
	sc := bufio.NewScanner(fd)
	for sc.Scan() {
		c, ok := parseClaim(sc.Text())
		if !ok || c.job == cl.job {
			continue
		}
		key := [2]uint64{uint64(c.pid), c.start}
		alive, seen := live[key]
		if !seen {
			s, ok := procStart(c.pid)
			alive = ok && s == c.start
			live[key] = alive
		}
		if alive {
			others = append(others, c)
		}
	}
	var b bytes.Buffer
	for _, c := range f(others) {
		b.WriteString(c.String())
	}
	if err := fd.Truncate(0); err != nil {
		return err
	}
	_, err = fd.WriteAt(b.Bytes(), 0)
	return err
}

// parseClaim reads a line "pid start job cpu".
func parseClaim(line string) (cpuClaim, bool) {
	f := strings.Fields(line)
	if len(f) != 4 {
		return cpuClaim{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	cpu, err3 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil || pid <= 0 || cpu < 0 || f[2] == "" {
		return cpuClaim{}, false
	}
	return cpuClaim{pid: pid, start: start, job: f[2], cpu: cpu}, true
}

// procStart is pid's start time (clock ticks since boot); false when there
// is no such process.
func procStart(pid int) (uint64, bool) {
	_, start, err := procstat.Stat(pid)
	return start, err == nil
}
