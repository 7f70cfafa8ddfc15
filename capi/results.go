//go:build cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#define DETCOLL_TYPES_ONLY
#include "detcoll.h"

static const char* detcoll_result_string(int r) {
	switch (r) {
	case detcollSuccess: return "no error";
	case detcollUnhandledDeviceError: return "unhandled device (CUDA/HIP) error";
	case detcollSystemError: return "system error (operating system or network)";
	case detcollInternalError: return "internal error (a bug in detcoll)";
	case detcollInvalidArgument: return "invalid argument";
	case detcollInvalidUsage: return "invalid usage";
	case detcollRemoteError: return "remote error (a peer failed or went away)";
	case detcollMismatch: return "ranks called mismatched collectives";
	case detcollTimeout: return "timeout";
	case detcollClosed: return "communicator destroyed or aborted";
	case detcollUnsupported: return "unsupported by this build of detcoll";
	default: return "unknown detcoll result";
	}
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// result is a detcollResult_t.
type result int32

// The results, from include/detcoll.h.
const (
	rcSuccess         result = C.detcollSuccess
	rcDeviceError     result = C.detcollUnhandledDeviceError
	rcSystemError     result = C.detcollSystemError
	rcInternalError   result = C.detcollInternalError
	rcInvalidArgument result = C.detcollInvalidArgument
	rcInvalidUsage    result = C.detcollInvalidUsage
	rcRemoteError     result = C.detcollRemoteError
	rcMismatch        result = C.detcollMismatch
	rcTimeout         result = C.detcollTimeout
	rcClosed          result = C.detcollClosed
	rcUnsupported     result = C.detcollUnsupported
	rcNumResults      result = C.detcollNumResults
	headerVersionCode        = C.DETCOLL_VERSION_CODE
	uniqueIDBytes            = C.DETCOLL_UNIQUE_ID_BYTES
)

// resultString is detcollGetErrorString's static C string.
func resultString(r result) *C.char { return C.detcoll_result_string(C.int(r)) }

// resultText is resultString as a Go string.
func resultText(r result) string { return C.GoString(resultString(r)) }

// codedError carries an explicit result; classify honours it first.
type codedError struct {
	code result
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

func coded(code result, format string, args ...any) error {
	return &codedError{code: code, err: fmt.Errorf(format, args...)}
}

// argError is an invalid argument detected by the C API itself.
func argError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", detcoll.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

func usageError(format string, args ...any) error { return coded(rcInvalidUsage, format, args...) }

// errDevice is wrapped by device backends' errors from the CUDA/HIP runtime
// (detcollUnhandledDeviceError).
var errDevice = errors.New("device error")

// classify maps an error to its result. Order matters: an explicit code
// first, then argument errors (which never poison a communicator), then the
// causes of a poisoned communicator, most specific first.
func classify(err error) result {
	var ce *codedError
	var de *detcoll.Error
	var te *transport.Error
	switch {
	case err == nil:
		return rcSuccess
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, detcoll.ErrInvalidArgument):
		return rcInvalidArgument
	case errors.Is(err, launch.ErrInvalidEnv), errors.Is(err, store.ErrAuth):
		return rcInvalidUsage
	case errors.Is(err, detcoll.ErrMismatch), errors.Is(err, transport.ErrTagMismatch), errors.Is(err, transport.ErrSizeMismatch):
		return rcMismatch
	case errors.Is(err, detcoll.ErrUnsupported):
		return rcUnsupported
	case errors.Is(err, errDevice):
		return rcDeviceError
	case errors.Is(err, detcoll.ErrClosed), errors.Is(err, transport.ErrClosed):
		return rcClosed
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return rcTimeout
	case errors.Is(err, transport.ErrPeerClosed), errors.Is(err, transport.ErrCorrupt),
		errors.As(err, &de) && de.Peer >= 0, errors.As(err, &te) && te.Peer >= 0:
		return rcRemoteError
	}
	return rcSystemError
}
