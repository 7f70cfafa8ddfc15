package binding

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type code int32

type testVendor struct{}

var errTestUnavailable = errors.New("test: unavailable")

func (testVendor) Name() string       { return "test" }
func (testVendor) Unavailable() error { return errTestUnavailable }

type otherVendor struct{}

func (otherVendor) Name() string       { return "other" }
func (otherVendor) Unavailable() error { return errors.New("other: unavailable") }

func TestError(t *testing.T) {
	e := &Error[code, testVendor]{Code: 2, Name: "T_OOM", Message: "out of memory", Call: "tAlloc_v2"}
	if got, want := e.Error(), "test: tAlloc_v2: T_OOM (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, &Error[code, testVendor]{Code: 2}) || errors.Is(e, &Error[code, testVendor]{Code: 3}) {
		t.Error("Is does not match by code")
	}
	if errors.Is(e, errTestUnavailable) {
		t.Error("a call failure matches ErrUnavailable")
	}
	u := &Error[code, testVendor]{Code: CodeUnavailable, Name: "GONE", Call: "dlopen"}
	if !errors.Is(u, errTestUnavailable) {
		t.Error("a load failure does not wrap the vendor's ErrUnavailable")
	}
	if (&Error[code, testVendor]{Name: "N", Call: "c"}).Error() != "test: c: N" {
		t.Error("empty message is printed")
	}
	var o error = &Error[code, otherVendor]{Code: 2}
	if errors.Is(e, o) {
		t.Error("errors of two vendors match")
	}
}

func TestLogError(t *testing.T) {
	e := &LogError[code, testVendor]{Code: 6, Name: "T_COMPILATION", Call: "tCompile", Log: "\n  line 1: error\n"}
	if got, want := e.Error(), "test: tCompile: T_COMPILATION\nline 1: error"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, &LogError[code, testVendor]{Code: 6}) || errors.Is(e, &LogError[code, testVendor]{Code: 5}) {
		t.Error("Is does not match by code")
	}
	if !errors.Is(&LogError[code, testVendor]{Code: CodeUnavailable}, errTestUnavailable) {
		t.Error("a load failure does not wrap ErrUnavailable")
	}
}

func TestCodeOfAndAnnotate(t *testing.T) {
	e := &Error[code, testVendor]{Code: 600, Message: "not ready"}
	l := &LogError[code, otherVendor]{Code: 6}
	if c, ok := CodeOf(e); !ok || c != 600 {
		t.Errorf("CodeOf(Error) = %d, %v", c, ok)
	}
	if c, ok := CodeOf(l); !ok || c != 6 {
		t.Errorf("CodeOf(LogError) = %d, %v", c, ok)
	}
	plain := errors.New("plain")
	if _, ok := CodeOf(plain); ok {
		t.Error("CodeOf of a plain error")
	}
	Annotate(e, " (kernel k)")
	Annotate(l, "!")
	Annotate(plain, "x")
	Annotate(nil, "x")
	if e.Message != "not ready (kernel k)" || l.Message != "!" || plain.Error() != "plain" {
		t.Errorf("Annotate: %q %q %q", e.Message, l.Message, plain)
	}
}

func TestName(t *testing.T) {
	names := map[code]string{0: "T_OK", -2: "T_GONE"}
	for r, want := range map[code]string{0: "T_OK", -2: "T_GONE", 7: "T_ERROR_7", -5: "T_ERROR_-5"} {
		if got := Name(names, "T_ERROR_%d", r); got != want {
			t.Errorf("Name(%d) = %q, want %q", r, got, want)
		}
	}
}

func TestTableUnopened(t *testing.T) {
	tb := NewTable[int]([]Symbol{{API: "tInit", Candidates: []string{"tInit_v2", "tInit"}}, {API: "tOpt", Candidates: []string{"tOpt"}, Optional: true}})
	if tb.Have(0) || tb.Ptr(1) != 0 || tb.Path() != "" {
		t.Error("an unopened table has symbols")
	}
	if tb.Resolved(0) != "tInit_v2" {
		t.Errorf("Resolved = %q, want the preferred candidate", tb.Resolved(0))
	}
	if i, ok := tb.Lookup("tOpt"); !ok || i != 1 {
		t.Errorf("Lookup(tOpt) = %d, %v", i, ok)
	}
	if tb.SymbolName("tOpt") != "tOpt" || tb.SymbolName("tNone") != "" || tb.API(0) != "tInit" {
		t.Error("SymbolName/API do not follow the table")
	}
	if _, ok := tb.Lookup("tNone"); ok {
		t.Error("Lookup found an unknown name")
	}
}

func TestTableLoadOnce(t *testing.T) {
	tb := NewTable[int]([]Symbol{{API: "tInit", Candidates: []string{"tInit"}}})
	n := 0
	boom := errors.New("boom")
	for i := 0; i < 3; i++ {
		if err := tb.Load(func() error { n++; return boom }); err != boom {
			t.Fatalf("Load = %v, want the first outcome", err)
		}
	}
	if n != 1 {
		t.Errorf("load ran %d times", n)
	}
	if tb.LoadedPath(func() error { return boom }) != "" || tb.LoadedPath(func() error { return nil }) != "" {
		t.Error("LoadedPath of an unopened table is not empty")
	}
}

func TestNilTable(t *testing.T) {
	var tb *Table[int]
	if tb.Have(0) || tb.Ptr(3) != 0 {
		t.Error("a nil table has symbols")
	}
}

func TestTableOpenFails(t *testing.T) {
	tb := NewTable[int]([]Symbol{{API: "tInit", Candidates: []string{"tInit"}}})
	t.Setenv("DETCOLL_BINDING_TEST_LIB", "/nonexistent/libnothing.so")
	err := tb.Open("DETCOLL_BINDING_TEST_LIB", "libnothing.so")
	var le *LoadError
	if !errors.As(err, &le) || le.Call != "dlopen" || !strings.Contains(le.Message, "libnothing") {
		t.Fatalf("Open = %v, want a dlopen *LoadError naming the library", err)
	}
	f := LoadFailure[code, testVendor](err, "T_GONE")
	if f.Code != CodeUnavailable || f.Call != "dlopen" || f.Name != "T_GONE" || !errors.Is(f, errTestUnavailable) {
		t.Errorf("LoadFailure = %+v", f)
	}
	if tb.Path() != "" || tb.Have(0) {
		t.Error("a failed Open left the table opened")
	}
}

// Call: init's error first; a symbol the table lacks is the not-found code,
// never a call; otherwise f's result through errorOf.
func TestCallPrologue(t *testing.T) {
	tab := NewTable[int]([]Symbol{{API: "xA", Optional: true}})
	calls := 0
	errorOf := func(s int, r int32) error {
		if r == 0 {
			return nil
		}
		return fmt.Errorf("sym %d: code %d", s, r)
	}
	f := func() int32 { calls++; return 0 }
	boom := errors.New("no library")
	if err := Call(tab, func() error { return boom }, errorOf, -1, 0, f); err != boom {
		t.Errorf("init error: %v", err)
	}
	if err := Call(tab, func() error { return nil }, errorOf, -1, 0, f); err == nil || err.Error() != "sym 0: code -1" {
		t.Errorf("missing symbol: %v", err)
	}
	if calls != 0 {
		t.Errorf("f called %d times", calls)
	}
}

// ErrorOf: success is nil; the not-found code names the entry point and
// asks the library nothing; other codes take the table's name unless the
// library's own answer replaces it.
func TestErrorOf(t *testing.T) {
	tab := NewTable[int]([]Symbol{{API: "xAlloc", Candidates: []string{"xAlloc_v2"}}})
	names := func(r code) string { return fmt.Sprintf("X_%d", r) }
	asked := 0
	describe := func(r code) (string, string) {
		asked++
		if r == 2 {
			return "X_OUT_OF_MEMORY", "out of memory"
		}
		return "", ""
	}
	of := func(r code) *Error[code, testVendor] {
		err := ErrorOf[int, code, testVendor](tab, 0, r, -1, "x library", names, describe)
		if err == nil {
			return nil
		}
		return err.(*Error[code, testVendor])
	}
	if of(0) != nil {
		t.Fatal("success mapped to an error")
	}
	if e := of(-1); e.Name != "X_-1" || e.Message != "the loaded x library does not export xAlloc" || asked != 0 {
		t.Errorf("not found: %+v (asked %d)", e, asked)
	}
	if e := of(2); e.Name != "X_OUT_OF_MEMORY" || e.Message != "out of memory" || e.Code != 2 {
		t.Errorf("described: %+v", e)
	}
	if e := of(7); e.Name != "X_7" || e.Message != "" {
		t.Errorf("undescribed: %+v", e)
	}
}
