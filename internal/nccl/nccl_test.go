package nccl

import (
	"errors"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	if NCCLNames[0] != "libnccl.so.2" || NCCLEnv != "DETCOLL_NCCL_LIB" {
		t.Fatalf("names %v env %s", NCCLNames, NCCLEnv)
	}
	for _, n := range NCCLNames {
		if strings.Contains(n, "rccl") {
			t.Fatalf("an RCCL name in NCCL's list: %v (RCCL is internal/rccl's)", NCCLNames)
		}
	}
}

func TestLoadHere(t *testing.T) {
	t.Setenv("DETCOLL_TEST_NCCL", "")
	_, err := Load("DETCOLL_TEST_NCCL", "libdetcoll-no-nccl.so.2")
	if err == nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing library: %v", err)
	}
	if err := Available(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	l, _ := Default()
	v, err := l.Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NCCL %v at %s", v, l.Path())
}
