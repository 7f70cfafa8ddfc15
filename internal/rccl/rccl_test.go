package rccl

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestLibraryNames(t *testing.T) {
	t.Setenv("ROCM_PATH", "/opt/rocm-7.0.0")
	n := LibraryNames()
	if n[0] != "librccl.so.1" || !strings.Contains(strings.Join(n, " "), "/opt/rocm-7.0.0/lib/librccl.so.1") ||
		n[len(n)-1] != "/opt/rocm/lib/librccl.so.1" {
		t.Fatalf("names %v", n)
	}
	for _, x := range n {
		if strings.Contains(x, "nccl") {
			t.Fatalf("an NCCL name among RCCL's: %v", n)
		}
	}
	if LibraryEnv != "DETCOLL_RCCL_LIB" {
		t.Fatal(LibraryEnv)
	}
}

func TestLoadMissing(t *testing.T) {
	t.Setenv(LibraryEnv, "/nonexistent/librccl.so.1")
	_, err := Load()
	var e *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Vendor != "rccl" {
		t.Fatalf("missing RCCL: %v", err)
	}
	if os.Getenv("CGO_ENABLED") != "0" && !strings.Contains(err.Error(), "/nonexistent/librccl.so.1") &&
		!strings.Contains(err.Error(), "without cgo") {
		t.Fatalf("error does not name the override: %v", err)
	}
}
