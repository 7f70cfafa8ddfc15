//go:build cgo

package dl

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// dc_open opens name and copies dlerror() into err on failure; the open and
// the error read happen in one C call, hence on one thread.
static uintptr_t dc_open(const char* name, char* err, size_t errlen) {
	void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char* e = dlerror();
		if (e == NULL) e = "unknown dlopen error";
		strncpy(err, e, errlen - 1);
		err[errlen - 1] = 0;
	}
	return (uintptr_t)h;
}

static uintptr_t dc_sym(uintptr_t h, const char* name) {
	dlerror();
	return (uintptr_t)dlsym((void*)h, name);
}

// dc_path writes the file the loader mapped for handle h.
static int dc_path(uintptr_t h, char* out, size_t outlen) {
	struct link_map* lm = NULL;
	if (dlinfo((void*)h, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL || lm->l_name == NULL) return -1;
	strncpy(out, lm->l_name, outlen - 1);
	out[outlen - 1] = 0;
	return 0;
}

static int dc_close(uintptr_t h) { return dlclose((void*)h); }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

func open(name string) (*Library, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var errbuf [512]C.char
	h := C.dc_open(cname, &errbuf[0], C.size_t(len(errbuf)))
	if h == 0 {
		return nil, errors.New(C.GoString(&errbuf[0]))
	}
	l := &Library{handle: uintptr(h), name: name}
	var pbuf [4096]C.char
	if C.dc_path(h, &pbuf[0], C.size_t(len(pbuf))) == 0 {
		l.path = C.GoString(&pbuf[0])
	}
	return l, nil
}

func (l *Library) sym(name string) (Symbol, error) {
	if l == nil || l.handle == 0 {
		return 0, fmt.Errorf("%w: symbol %s: library not open", ErrNotFound, name)
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	p := C.dc_sym(C.uintptr_t(l.handle), cname)
	if p == 0 {
		return 0, fmt.Errorf("%w: symbol %s in %s", ErrNotFound, name, l.Path())
	}
	return Symbol(p), nil
}

func (l *Library) close() error {
	if l == nil || l.handle == 0 {
		return nil
	}
	if C.dc_close(C.uintptr_t(l.handle)) != 0 {
		return fmt.Errorf("dl: dlclose %s failed", l.Path())
	}
	l.handle = 0
	return nil
}
