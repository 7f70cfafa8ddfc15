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
