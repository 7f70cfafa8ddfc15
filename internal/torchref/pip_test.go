package torchref

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPipInstall installs python/ into a fresh virtual environment the way
// the README says, offline (--no-build-isolation --no-index: Debian's
// python3-setuptools and python3-wheel do the build), and checks that the
// package's build step built libdetcoll.so with Go and ships it: the
// installed package loads it from inside the environment and runs a
// collective. Then the same install without Go on PATH must fail saying
// that Go is needed.
func TestPipInstall(t *testing.T) {
	py := torchPython(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root := repoRoot()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// pip builds in the source tree (python/build, python/detcoll.egg-info,
	// both git-ignored); remove what this test created.
	for _, d := range []string{"build", "detcoll.egg-info"} {
		p := filepath.Join(root, "python", d)
		if _, err := os.Stat(p); os.IsNotExist(err) {
			t.Cleanup(func() { os.RemoveAll(p) })
		}
	}
	run := func(env []string, name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = env
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	// A venv without its own pip (ensurepip is slow); the system pip
	// installs into it with --python.
	venv := filepath.Join(t.TempDir(), "venv")
	env := append(cleanEnv(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1")
	if out, err := run(env, py, "-m", "venv", "--system-site-packages", "--without-pip", venv); err != nil {
		t.Skipf("%s -m venv: %v (install python3-venv)\n%s", py, err, out)
	}
	vpy := filepath.Join(venv, "bin", "python")
	install := func(env []string) (string, error) {
		return run(env, py, "-m", "pip", "--python", vpy, "install", "--no-build-isolation", "--no-index", filepath.Join(root, "python"))
	}

	// Without Go: a clear error, not a package without its library.
	noGo := append([]string{}, env...)
	for i, kv := range noGo {
		if strings.HasPrefix(kv, "PATH=") {
			noGo[i] = "PATH=" + withoutDir(strings.TrimPrefix(kv, "PATH="), filepath.Dir(goBin))
		}
	}
	if out, err := install(noGo); err == nil || !strings.Contains(out, "needs Go") {
		t.Fatalf("pip install without Go: err %v, want a failure saying Go is needed\n%s", err, out)
	}

	if out, err := install(env); err != nil {
		t.Fatalf("pip install ./python: %v\n%s", err, out)
	}
	out, err := run(append(env, "DETCOLL_CUDA_LIB=/nonexistent/libcuda.so.1"), vpy, "-c",
		"import detcoll, array; print(detcoll.library_path()); c = detcoll.init(); "+
			"x = array.array('f', [1.5, 2.5]); detcoll.all_reduce(x); print(list(x), c.size); "+
			"import detcoll.torch.parallel as P; print(P.__file__)")
	if err != nil {
		t.Fatalf("installed package: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], venv) || lines[1] != "[1.5, 2.5] 1" || !strings.HasPrefix(lines[2], venv) {
		t.Fatalf("installed package: want the library and detcoll.torch from %s and [1.5, 2.5] 1, got\n%s", venv, out)
	}
}

func withoutDir(path, dir string) string {
	var keep []string
	for _, p := range filepath.SplitList(path) {
		if filepath.Clean(p) != filepath.Clean(dir) {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, string(os.PathListSeparator))
}
