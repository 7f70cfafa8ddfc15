//go:build cgo

package rtc

import (
	"errors"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding"
	"github.com/detcoll/detcoll/internal/binding/bindingtest"
	"github.com/detcoll/detcoll/internal/dl"
)

// A stand-in compiler with the ABI NVRTC and hiprtc share, built here with
// the host C compiler: a source containing "bad" fails to compile (result 6)
// with a log naming the options; "empty" compiles to an empty image;
// anything else compiles to "IMG:" + the source. This checks the
// trampolines' prototypes and the compile flow without a GPU toolkit.
const fakeCompiler = `
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
typedef struct { char* src; char log[256]; size_t loglen; int ok; } prog;
int fakeVersion(int* a, int* b) { *a = 12; *b = 8; return 0; }
const char* fakeGetErrorString(int r) { return r == 6 ? "FAKE_COMPILATION" : r == 0 ? "FAKE_SUCCESS" : NULL; }
int fakeGetNum(int* n) { *n = 3; return 0; }
int fakeGetList(int* a) { a[0] = 80; a[1] = 90; a[2] = 100; return 0; }
int fakeCreate(prog** p, const char* src, const char* name, int n, const char* const* h, const char* const* i) {
	if (n != 0 || h || i || !name) return 3;
	*p = calloc(1, sizeof(prog)); (*p)->src = strdup(src); return 0;
}
int fakeCompile(prog* p, int n, const char* const* opts) {
	p->loglen = 0;
	for (int i = 0; i < n; i++) p->loglen += snprintf(p->log + p->loglen, sizeof p->log - p->loglen, "opt %s;", opts[i]);
	p->ok = strstr(p->src, "bad") == NULL;
	if (p->loglen) p->loglen++;
	return p->ok ? 0 : 6;
}
int fakeLogSize(prog* p, size_t* n) { *n = p->loglen; return 0; }
int fakeLog(prog* p, char* out) { memcpy(out, p->log, p->loglen); return 0; }
int fakeCodeSize(prog* p, size_t* n) { *n = strstr(p->src, "empty") ? 0 : 4 + strlen(p->src); return 0; }
int fakeCode(prog* p, char* out) { memcpy(out, "IMG:", 4); memcpy(out + 4, p->src, strlen(p->src)); return 0; }
int fakeDestroy(prog** p) { free((*p)->src); free(*p); *p = NULL; return 0; }
`

type res int32

type fakeVendor struct{}

var errFakeUnavailable = errors.New("fake: unavailable")

func (fakeVendor) Name() string       { return "fake" }
func (fakeVendor) Unavailable() error { return errFakeUnavailable }

type fakeErr = binding.LogError[res, fakeVendor]

func buildFake(t *testing.T) *dl.Library {
	t.Helper()
	lib := bindingtest.Build(t, t.TempDir(), "libfakertc.so", "compiler", fakeCompiler)
	l, err := dl.Open("", lib)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestFakeCompiler(t *testing.T) {
	l := buildFake(t)
	addr := func(name string) uintptr {
		p, err := l.Sym(name)
		if err != nil {
			t.Fatal(err)
		}
		return uintptr(p)
	}
	e := func(name string) Entry { return Entry{Fn: addr(name), Name: name} }
	name := func(r res) string { return "R" + string(rune('0'+r)) }
	errorOf := func(call string, r res) error {
		return ErrorOf[res, fakeVendor](addr("fakeGetErrorString"), name, call, r)
	}
	if errorOf("x", 0) != nil {
		t.Error("ErrorOf(success) is an error")
	}
	if err := ErrorOf[res, fakeVendor](0, name, "x", 6); err.Error() != "fake: x: R6" {
		t.Errorf("ErrorOf without GetErrorString = %q", err)
	}
	p := Program{Create: e("fakeCreate"), Compile: e("fakeCompile"), LogSize: e("fakeLogSize"), Log: e("fakeLog"),
		Destroy: e("fakeDestroy"), Size: e("fakeCodeSize"), Get: e("fakeCode"), Empty: "no image"}

	if a, b, r := Version(addr("fakeVersion")); a != 12 || b != 8 || r != 0 {
		t.Errorf("Version = %d, %d, %d", a, b, r)
	}
	if s, ok := ErrorString(addr("fakeGetErrorString"), 6); !ok || s != "FAKE_COMPILATION" {
		t.Errorf("ErrorString(6) = %q, %v", s, ok)
	}
	if _, ok := ErrorString(addr("fakeGetErrorString"), 1); ok {
		t.Error("ErrorString of a code without a string reported one")
	}
	if _, ok := ErrorString(0, 6); ok {
		t.Error("ErrorString without the entry point reported one")
	}
	if n, r := Ints(addr("fakeGetNum"), 1); r != 0 || len(n) != 1 || n[0] != 3 {
		t.Fatalf("Ints(num) = %v, %d", n, r)
	}
	if a, r := Ints(addr("fakeGetList"), 3); r != 0 || len(a) != 3 || a[0] != 80 || a[2] != 100 {
		t.Errorf("Ints(list) = %v, %d", a, r)
	}

	img, log, err := Compile[res, fakeVendor](p, errorOf, "kernel", "k.cu", []string{"-a", "--b=c"})
	if err != nil || string(img) != "IMG:kernel" || log != "opt -a;opt --b=c;" {
		t.Errorf("Compile = %q, %q, %v", img, log, err)
	}
	if img, log, err := Compile[res, fakeVendor](p, errorOf, "kernel", "k.cu", nil); err != nil || string(img) != "IMG:kernel" || log != "" {
		t.Errorf("Compile without options = %q, %q, %v", img, log, err)
	}

	_, log, err = Compile[res, fakeVendor](p, errorOf, "bad kernel", "bad.cu", []string{"-x"})
	var fe *fakeErr
	if !errors.As(err, &fe) || fe.Code != 6 || fe.Call != "fakeCompile" || fe.Log != "opt -x;" || log != "opt -x;" ||
		fe.Message != "program bad.cu, options [-x]" {
		t.Errorf("failed Compile = %q, %#v", log, err)
	}
	if !strings.HasSuffix(err.Error(), "\nopt -x;") {
		t.Errorf("the log is not in the message: %q", err)
	}

	_, _, err = Compile[res, fakeVendor](p, errorOf, "empty", "e.cu", nil)
	if !errors.As(err, &fe) || fe.Code != 3 || fe.Call != "fakeCode" || fe.Message != "no image" {
		t.Errorf("empty Compile = %#v", err)
	}
}
