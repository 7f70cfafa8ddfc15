//go:build cgo

package main

/*
#include <stdlib.h>
#include <string.h>

// Thread-local message buffers. Exported functions run on their C caller's
// thread, so what Go writes here during a call belongs to that thread. The
// buffers grow as needed and are never freed (one pair per thread that ever
// failed a call).
static __thread char* detcoll_tls_buf[2];
static __thread size_t detcoll_tls_cap[2];

// detcoll_tls_set copies n bytes of msg into slot and returns the stable copy.
__attribute__((visibility("hidden"))) const char* detcoll_tls_set(int slot, const char* msg, size_t n) {
	if (n + 1 > detcoll_tls_cap[slot]) {
		size_t c = detcoll_tls_cap[slot] ? detcoll_tls_cap[slot] : 256;
		while (c < n + 1) c *= 2;
		char* b = (char*)realloc(detcoll_tls_buf[slot], c);
		if (b == NULL) {
			// Keep the old buffer; truncate.
			if (detcoll_tls_cap[slot] == 0) return "";
			n = detcoll_tls_cap[slot] - 1;
		} else {
			detcoll_tls_buf[slot] = b;
			detcoll_tls_cap[slot] = c;
		}
	}
	if (n > 0) memcpy(detcoll_tls_buf[slot], msg, n);
	detcoll_tls_buf[slot][n] = 0;
	return detcoll_tls_buf[slot];
}

__attribute__((visibility("hidden"))) const char* detcoll_tls_get(int slot) {
	return detcoll_tls_buf[slot] ? detcoll_tls_buf[slot] : "";
}

static char* detcoll_getenv(const char* name) { return getenv(name); }
*/
import "C"

import (
	"unsafe"
)

// Thread-local slots.
const (
	slotThread = 0 // the calling thread's last failure
	slotComm   = 1 // the copy handed out by detcollGetLastError(comm)
)

// maxMessage bounds a recorded message (longer ones are cut).
const maxMessage = 64 << 10

// setThreadMessage records msg as the calling thread's last error and
// returns the thread-local C copy.
func setThreadMessage(slot int, msg string) *C.char {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-len(" …(cut)")] + " …(cut)"
	}
	if msg == "" {
		return C.detcoll_tls_set(C.int(slot), nil, 0)
	}
	p := unsafe.Pointer(unsafe.StringData(msg))
	// msg is Go memory passed to C for the call only; C copies it.
	return C.detcoll_tls_set(C.int(slot), (*C.char)(p), C.size_t(len(msg)))
}

// threadMessage is the calling thread's slot, "" if none.
func threadMessage(slot int) *C.char { return C.detcoll_tls_get(C.int(slot)) }

// cgetenv reads the C environment now (not Go's copy taken at load time), so
// a host program that sets variables after loading the library is seen.
func cgetenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.detcoll_getenv(cs)
	if v == nil {
		return ""
	}
	return C.GoString(v)
}

// goString copies a C string (for tests, which cannot use cgo).
func goString(p *C.char) string { return C.GoString(p) }
