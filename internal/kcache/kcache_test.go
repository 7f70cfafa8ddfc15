package kcache

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestKey(t *testing.T) {
	o := []string{"-a", "-b"}
	k := Key("tag-v1", []string{"1.0", "x"}, o, "src")
	if len(k) != 64 || k != Key("tag-v1", []string{"1.0", "x"}, o, "src") {
		t.Fatal("key not stable")
	}
	for i, d := range []string{
		Key("tag-v2", []string{"1.0", "x"}, o, "src"),
		Key("tag-v1", []string{"1.0x"}, o, "src"),
		Key("tag-v1", []string{"1.0", "x", ""}, o, "src"),
		Key("tag-v1", []string{"1.0", "y"}, o, "src"),
		Key("tag-v1", []string{"1.0", "x"}, o[:1], "src"),
		Key("tag-v1", []string{"1.0", "x"}, []string{"-a-b"}, "src"),
		Key("tag-v1", []string{"1.0", "x"}, o, "src2"),
	} {
		if d == k {
			t.Errorf("variant %d has the same key", i)
		}
	}
}

func TestFiles(t *testing.T) {
	t.Setenv(Env, "")
	t.Setenv("XDG_CACHE_HOME", "/tmp/xdg")
	if Dir() != filepath.Join("/tmp/xdg", "detcoll", "kernels") {
		t.Fatalf("default %s", Dir())
	}
	dir := t.TempDir()
	t.Setenv(Env, dir)
	if Dir() != dir {
		t.Fatal("override")
	}
	p := Path("abc", ".bin")
	if p != filepath.Join(dir, "abc.bin") {
		t.Fatalf("path %s", p)
	}
	if Read(p) != nil || Read("") != nil {
		t.Fatal("read of a missing file")
	}
	WriteAtomic(p, nil)
	if Read(p) != nil {
		t.Fatal("an empty file is not an image")
	}
	WriteAtomic(p, []byte("image"))
	if string(Read(p)) != "image" {
		t.Fatal("read back")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("leftover files: %v", ents)
	}
	WriteAtomic(Path("abc", ".other"), []byte("x"))
	Remove("abc", ".bin", ".other", ".none")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("not removed: %v", ents)
	}
}

func TestMemory(t *testing.T) {
	type prog struct{ From string }
	var c Memory[prog]
	if _, ok := c.Get("k"); ok {
		t.Fatal("hit in an empty cache")
	}
	p := &prog{From: "compiled"}
	c.Put("k", p)
	p.From = "changed by the caller"
	q, ok := c.Get("k")
	if !ok || q.From != "compiled" {
		t.Fatalf("get %+v %v", q, ok)
	}
	q.From = "memory"
	if r, _ := c.Get("k"); r.From != "compiled" {
		t.Fatal("Get handed out the cached value")
	}
	c.Delete("k")
	if _, ok := c.Get("k"); ok {
		t.Fatal("not deleted")
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Put("k", &prog{})
			c.Get("k")
			c.Delete("k")
		}()
	}
	wg.Wait()
}

// Fetch: compiled first (and written to disk), then from memory; with the
// memory copy gone, from disk unless fromDisk refuses the file; an error
// of compile caches nothing. Invalidate removes both copies.
func TestFetchAndInvalidate(t *testing.T) {
	type prog struct{ Image, From string }
	t.Setenv(Env, t.TempDir())
	var c Memory[prog]
	compiles := 0
	accept := true
	mark := func(p *prog, from string) { p.From = from }
	fromDisk := func(b []byte) *prog {
		if !accept {
			return nil
		}
		return &prog{Image: string(b)}
	}
	compile := func() (*prog, []byte, error) { compiles++; return &prog{Image: "img"}, []byte("img"), nil }
	fetch := func(want string) {
		t.Helper()
		p, err := c.Fetch("k", Path("k", ".bin"), mark, fromDisk, compile)
		if err != nil || p.From != want || p.Image != "img" {
			t.Fatalf("Fetch = %+v, %v; want from %s", p, err, want)
		}
	}
	fetch("compiled")
	fetch("memory")
	c.Delete("k")
	fetch("disk")
	c.Delete("k")
	accept = false
	fetch("compiled")
	if compiles != 2 {
		t.Fatalf("%d compiles, want 2", compiles)
	}
	c.Invalidate("k", ".bin")
	if _, ok := c.Get("k"); ok || Read(Path("k", ".bin")) != nil {
		t.Fatal("Invalidate left a copy")
	}
	boom := os.ErrPermission
	if _, err := c.Fetch("k", Path("k", ".bin"), mark, fromDisk, func() (*prog, []byte, error) { return nil, nil, boom }); err != boom {
		t.Fatalf("compile error %v", err)
	}
	if _, ok := c.Get("k"); ok || Read(Path("k", ".bin")) != nil {
		t.Fatal("a failed compile was cached")
	}
}
