// Package kcache is the compiled-kernel cache that internal/nvrtc and
// internal/hiprtc share: the cache key (a sha256 over the compiler's key
// material, the options and the source), the disk cache directory, atomic
// writes of images into it, and the in-memory cache of programs. It is pure
// Go and vendor-neutral: each compiler passes its own key material, file
// extension and program type.
package kcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Env overrides the disk cache directory.
const Env = "DETCOLL_CACHE_DIR"

// Key is the hex sha256 of everything that determines an image: the tag
// (which names the compiler and the key format, e.g.
// "detcoll-kernel-cache-v1"), the compiler's key material (version,
// target, …), the options and the source, each delimited so that no two
// inputs hash the same bytes by concatenation.
func Key(tag string, material []string, options []string, source string) string {
	h := sha256.New()
	h.Write([]byte(tag))
	h.Write([]byte{0})
	for _, m := range material {
		h.Write([]byte(m))
		h.Write([]byte{0})
	}
	fmt.Fprintf(h, "%d\x00", len(options))
	for _, o := range options {
		fmt.Fprintf(h, "%d:%s\x00", len(o), o)
	}
	fmt.Fprintf(h, "%d:", len(source))
	h.Write([]byte(source))
	return hex.EncodeToString(h.Sum(nil))
}

// Dir is the disk cache directory: $DETCOLL_CACHE_DIR, else
// os.UserCacheDir()/detcoll/kernels, else "" (no disk cache).
func Dir() string {
	if d := os.Getenv(Env); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil || d == "" {
		return ""
	}
	return filepath.Join(d, "detcoll", "kernels")
}

// Path is the file of key with extension ext (".cubin", ".hsaco", …) in
// Dir, or "" when there is no disk cache.
func Path(key, ext string) string {
	d := Dir()
	if d == "" {
		return ""
	}
	return filepath.Join(d, key+ext)
}

// Read returns the image at path, or nil when path is "", the file is
// missing or unreadable, or empty.
func Read(path string) []byte {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// WriteAtomic writes b to path through a temporary file and a rename, so
// that readers never see a partial image; best effort (errors leave no
// file behind and are not reported).
func WriteAtomic(path string, b []byte) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr != nil || cerr != nil {
		_ = os.Remove(f.Name())
		return
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
	}
}

// Remove deletes the files of key with each extension from the disk cache.
func Remove(key string, exts ...string) {
	for _, ext := range exts {
		if p := Path(key, ext); p != "" {
			_ = os.Remove(p)
		}
	}
}

// Memory is the in-memory cache of programs of type P by key; the zero
// value is empty and ready to use. It hands out copies, so callers may set
// fields (e.g. where a program came from) on what they get.
type Memory[P any] struct {
	mu sync.Mutex
	m  map[string]*P
}

// Get returns a copy of the program cached under key.
func (c *Memory[P]) Get(key string) (*P, bool) {
	c.mu.Lock()
	p, ok := c.m[key]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	q := *p
	return &q, true
}

// Put caches a copy of p under key.
func (c *Memory[P]) Put(key string, p *P) {
	q := *p
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]*P{}
	}
	c.m[key] = &q
	c.mu.Unlock()
}

// Delete forgets key.
func (c *Memory[P]) Delete(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}

// Fetch is a compiler binding's cached build of the program of key: the
// copy cached in memory (marked mark(p, "memory")), else the one fromDisk
// makes of the image in the disk file at path (nil: unusable; marked
// "disk"), else the one compile makes (marked "compiled"; its image is
// written to path, best effort). A program not from memory is then cached
// in memory. An error of compile is returned as it is, and nothing is
// cached.
func (c *Memory[P]) Fetch(key, path string, mark func(p *P, from string), fromDisk func(image []byte) *P,
	compile func() (p *P, image []byte, err error)) (*P, error) {
	if q, ok := c.Get(key); ok {
		mark(q, "memory")
		return q, nil
	}
	var p *P
	if b := Read(path); b != nil {
		if p = fromDisk(b); p != nil {
			mark(p, "disk")
		}
	}
	if p == nil {
		var img []byte
		var err error
		if p, img, err = compile(); err != nil {
			return nil, err
		}
		mark(p, "compiled")
		if path != "" {
			WriteAtomic(path, img)
		}
	}
	c.Put(key, p)
	return p, nil
}

// Invalidate forgets key: the memory copy and the disk files with each
// extension (e.g. after the driver refused to load the image).
func (c *Memory[P]) Invalidate(key string, exts ...string) {
	c.Delete(key)
	Remove(key, exts...)
}
