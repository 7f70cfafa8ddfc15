package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"

	"github.com/detcoll/detcoll/transport"
)

// FailureMarker starts the one machine-readable line a failing worker
// prints (see ReportFailure) so that the launcher can name the root cause:
//
//	DETCOLL_FAILURE {"rank":1,"peer":2,"op":"recv","kind":"timeout","error":"…"}
const FailureMarker = "DETCOLL_FAILURE "

// Kinds of Failure.
const (
	KindTimeout    = "timeout"     // a deadline passed waiting on Peer
	KindPeerClosed = "peer_closed" // Peer's connection closed or reset
	KindCanceled   = "canceled"    // the worker was told to stop
	KindError      = "error"       // anything else
)

// Failure is what a worker says about why it failed.
type Failure struct {
	Rank int    `json:"rank"`
	Peer int    `json:"peer"` // the rank the failing operation waited on or talked to; -1 if none
	Op   string `json:"op,omitempty"`
	Kind string `json:"kind"`
	Err  string `json:"error"`
}

// FailureOf describes err, the error rank fails with: the peer is the first
// one named in err's chain by an error value with int fields Rank and Peer
// (transport.Error, detcoll.Error), the kind comes from the sentinels.
func FailureOf(rank int, err error) Failure {
	f := Failure{Rank: rank, Peer: -1, Kind: KindError}
	if err == nil {
		return f
	}
	f.Err = err.Error()
	var te *transport.Error
	if errors.As(err, &te) && te.Peer >= 0 && te.Peer != te.Rank {
		f.Peer, f.Op = te.Peer, te.Op
	} else if op, peer, ok := peerOf(err); ok {
		f.Peer, f.Op = peer, op
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		f.Kind = KindCanceled
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()):
		f.Kind = KindTimeout
	case errors.Is(err, transport.ErrPeerClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED):
		f.Kind = KindPeerClosed
	}
	return f
}

// peerOf walks err's chain for a struct with int fields Rank and Peer.
func peerOf(err error) (op string, peer int, ok bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		r, p := v.FieldByName("Rank"), v.FieldByName("Peer")
		if r.IsValid() && p.IsValid() && r.CanInt() && p.CanInt() && p.Int() >= 0 && p.Int() != r.Int() {
			if o := v.FieldByName("Op"); o.IsValid() && o.Kind() == reflect.String {
				op = o.String()
			}
			return op, int(p.Int()), true
		}
	}
	return "", -1, false
}

// WriteFailure prints f as one FailureMarker line.
func WriteFailure(w io.Writer, f Failure) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", FailureMarker, b)
	return err
}

// ReportFailure prints the FailureMarker line for err on w (normally
// os.Stderr) when this process runs as a rank under a launcher (rank from
// DETCOLL_RANK or RANK); it does nothing otherwise or for a nil err.
// Commands call it once, just before exiting with a failure.
func ReportFailure(w io.Writer, err error) {
	if err == nil {
		return
	}
	env, eerr := FromEnv(os.Getenv)
	if eerr != nil || env.WorldSize < 2 {
		return
	}
	_ = WriteFailure(w, FailureOf(env.Rank, err))
}

// parseFailure reads a FailureMarker line (without its newline).
func parseFailure(line []byte) (Failure, bool) {
	s := strings.TrimSpace(string(line))
	i := strings.Index(s, FailureMarker)
	if i < 0 {
		return Failure{}, false
	}
	var f Failure
	if err := json.Unmarshal([]byte(s[i+len(FailureMarker):]), &f); err != nil {
		return Failure{}, false
	}
	if f.Kind == "" {
		f.Kind = KindError
	}
	return f, true
}
