//go:build unix

package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the worker: TestMain runs helper instead of
// the tests when LAUNCH_HELPER names a mode.
func TestMain(m *testing.M) {
	if mode := os.Getenv("LAUNCH_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// workerVars are printed by the "env" mode.
var workerVars = []string{
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
	"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
	"DETCOLL_RANK", "DETCOLL_WORLD_SIZE", "DETCOLL_LOCAL_RANK", "DETCOLL_LOCAL_WORLD_SIZE",
	"DETCOLL_NODE_RANK", "DETCOLL_NNODES", "DETCOLL_STORE_ADDR", "DETCOLL_TOKEN", "DETCOLL_STORE_PORT",
	"OMP_NUM_THREADS", "TORCHELASTIC_USE_AGENT_STORE", "LAUNCH_BASE", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "DETCOLL_TCP_HOST", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
	"GOMAXPROCS",
}

func envInt(k string) int {
	n, err := strconv.Atoi(os.Getenv(k))
	if err != nil {
		return -1
	}
	return n
}

func helper(mode string) int {
	rank := envInt("DETCOLL_RANK")
	switch mode {
	case "hello":
		fmt.Printf("hello from %d\n", rank)
		fmt.Fprintf(os.Stderr, "to stderr from %d\n", rank)
		fmt.Printf("long:%s\n", strings.Repeat("x", MaxLineLen+100))
		fmt.Print("no newline at the end")
		return 0

	case "env":
		for _, k := range workerVars {
			if v, ok := os.LookupEnv(k); ok {
				fmt.Printf("%s=%s\n", k, v)
			}
		}
		env, err := FromEnv(os.Getenv)
		fmt.Printf("FromEnv=%+v err=%v\n", env, err)
		return 0

	case "affinity":
		// The CPUs this worker may run on, and DETCOLL_NODE_CPUS.
		cpus, err := allowedCPUs()
		v, ok := os.LookupEnv(EnvNodeCPUs)
		fmt.Printf("cpus=%v err=%v node=%s set=%v\n", cpus, err, v, ok)
		return 0

	case "fail":
		// LAUNCH_FAIL_RANK prints lines, then exits LAUNCH_FAIL_CODE (or
		// kills itself with LAUNCH_FAIL_SIGNAL); the others sleep, ignoring
		// SIGTERM if LAUNCH_IGNORE_TERM is set.
		if rank == envInt("LAUNCH_FAIL_RANK") {
			for i := range 30 {
				fmt.Printf("line %d\n", i)
			}
			fmt.Fprint(os.Stderr, "fatal: boom")
			time.Sleep(100 * time.Millisecond)
			if sig := envInt("LAUNCH_FAIL_SIGNAL"); sig > 0 {
				syscall.Kill(os.Getpid(), syscall.Signal(sig))
				time.Sleep(time.Minute)
			}
			return envInt("LAUNCH_FAIL_CODE")
		}
		if os.Getenv("LAUNCH_IGNORE_TERM") != "" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("sleeping")
		time.Sleep(time.Minute)
		return 0

	case "trap":
		// Report the first SIGINT/SIGTERM and exit 0.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		fmt.Println("ready")
		select {
		case s := <-ch:
			fmt.Printf("got %v\n", s)
			return 0
		case <-time.After(time.Minute):
			return 1
		}

	case "grandchild":
		// Start a sleeping child (in our process group), report its pid,
		// then fail if we are rank 0, else sleep.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "LAUNCH_HELPER=sleep")
		if err := cmd.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("child %d\n", cmd.Process.Pid)
		if rank == 0 {
			time.Sleep(200 * time.Millisecond)
			return 7
		}
		cmd.Wait()
		return 0

	case "sleep":
		time.Sleep(time.Minute)
		return 0

	case "store":
		// Rendezvous through FromEnv like a real program, count ourselves in.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		env, err := FromEnv(os.Getenv)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		st, closer, err := Rendezvous(ctx, env)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		n, err := st.Add(ctx, "count", 1)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if n == int64(env.WorldSize) {
			err = st.Set(ctx, "everyone", nil)
		}
		if err == nil {
			err = st.Wait(ctx, "everyone")
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("store ok source=%s world=%d\n", env.Source, env.WorldSize)
		if err := closer(); err != nil {
			fmt.Println(err)
			return 1
		}
		if rank == envInt("LAUNCH_FAIL_RANK") {
			return envInt("LAUNCH_FAIL_CODE")
		}
		if os.Getenv("LAUNCH_FAIL_RANK") != "" {
			time.Sleep(time.Minute) // stopped by the failure elsewhere
		}
		return 0

	case "launcher":
		// A launcher as a command would wire it: signals forwarded.
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		err := Run(context.Background(), Config{
			NprocPerNode: 2,
			Standalone:   true,
			Cmd:          []string{os.Args[0]},
			Env:          helperEnv("trap"),
			Signals:      sigs,
			GracePeriod:  5 * time.Second,
		})
		fmt.Printf("launcher: %v\n", err)
		return ExitCode(err)
	}
	fmt.Fprintf(os.Stderr, "unknown LAUNCH_HELPER mode %q\n", mode)
	return 2
}

// helperEnv is this process's environment without LAUNCH_* variables, plus
// LAUNCH_HELPER=mode and extra.
func helperEnv(mode string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LAUNCH_") {
			env = append(env, kv)
		}
	}
	// The race runtime otherwise sleeps 1 s in every exiting helper.
	env = append(env, "GORACE=atexit_sleep_ms=0")
	return append(append(env, "LAUNCH_HELPER="+mode), extra...)
}
