package dl

import (
	"errors"
	"strings"
	"testing"
)

func TestCandidates(t *testing.T) {
	t.Setenv("DETCOLL_TEST_LIB", "")
	got := Candidates("DETCOLL_TEST_LIB", []string{"a.so.1", "a.so"})
	if strings.Join(got, ",") != "a.so.1,a.so" {
		t.Fatalf("candidates without override = %v", got)
	}
	t.Setenv("DETCOLL_TEST_LIB", " /opt/x/liba.so ")
	got = Candidates("DETCOLL_TEST_LIB", []string{"a.so.1"})
	if len(got) != 1 || got[0] != "/opt/x/liba.so" {
		t.Fatalf("candidates with override = %v", got)
	}
	if got := Candidates("", []string{"b"}); len(got) != 1 || got[0] != "b" {
		t.Fatalf("no env var: %v", got)
	}
}

func TestOpenMissing(t *testing.T) {
	t.Setenv("DETCOLL_TEST_LIB", "")
	_, err := Open("DETCOLL_TEST_LIB", "libdetcoll-does-not-exist.so.7", "libdetcoll-nope.so")
	if err == nil {
		t.Fatal("opened a library that does not exist")
	}
	if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v wraps neither ErrNotFound nor ErrUnavailable", err)
	}
	if errors.Is(err, ErrNotFound) && !strings.Contains(err.Error(), "libdetcoll-nope.so") {
		t.Fatalf("error does not name the candidates: %v", err)
	}
}

func TestOverrideIsExclusive(t *testing.T) {
	// With the override set to a missing file, a loadable candidate must not be used.
	t.Setenv("DETCOLL_TEST_LIB", "/nonexistent/libc.so.6")
	_, err := Open("DETCOLL_TEST_LIB", "libc.so.6")
	if err == nil {
		t.Fatal("override was ignored")
	}
	if errors.Is(err, ErrNotFound) && !strings.Contains(err.Error(), "$DETCOLL_TEST_LIB") {
		t.Fatalf("error does not mention the override: %v", err)
	}
}

func TestEmptyNames(t *testing.T) {
	if _, err := Open(""); err == nil {
		t.Fatal("Open with no names succeeded")
	}
}
