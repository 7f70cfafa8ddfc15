package store

// Wire protocol, version 1. Every message is a frame: a big-endian uint32
// body length, then the body. Integers are big-endian.
//
//	hello (client→server, first frame): "dcst" version:u8 token:rest
//	welcome (server→client):            "dcst" version:u8 status:u8 message:rest
//	  (status ok: message is empty, or the server's idle timeout in ms as u64)
//	request:  op:u8 id:u64 fields
//	  set      key value:rest
//	  get      key
//	  wait     n:u32 n×key
//	  add      key delta:i64
//	  cas      key expected:bytes desired:rest
//	  delete   key
//	  cancel   (none; id names the blocked get/wait to abandon)
//	  ping     (none; no response: keeps an idle connection open)
//	response: id:u64 status:u8 payload:rest
//	  ok: get → value; cas → present:u8 value; add → i64; delete → existed:u8
//	  error: payload is the error text
//
// where key and bytes are len:u32 followed by that many bytes. Decoding is
// strict (no trailing bytes, limits checked before slicing), so that every
// accepted body has exactly one encoding; FuzzDecode checks that.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

const (
	magic   = "dcst"
	version = 1

	// maxFrame fits the largest request, a CompareSet with maximal key,
	// expected and desired.
	maxFrame = 1 + 8 + 4 + MaxKeyLen + 4 + 2*MaxValueLen
	// maxHello bounds what an unauthenticated peer can make us read.
	maxHello     = len(magic) + 1 + MaxKeyLen
	maxErrorText = 1 << 10
)

const (
	opSet byte = iota + 1
	opGet
	opWait
	opAdd
	opCAS
	opDelete
	opCancel
	opPing
)

// Status bytes of welcome and response frames.
const (
	statusOK byte = iota
	statusAuth
	statusVersion
	statusClosed
	statusProtocol
	statusBadCounter
	statusOther
	statusLimit // a server cap: MaxConns at the welcome, MaxBytes on a write, MaxParked on a get/wait (retried)
)

var opNames = [...]string{opSet: "set", opGet: "get", opWait: "wait", opAdd: "add", opCAS: "compareset", opDelete: "delete", opCancel: "cancel", opPing: "ping"}

type request struct {
	op       byte
	id       uint64
	key      string
	keys     []string // wait
	expected []byte   // cas
	value    []byte   // set; cas: desired
	delta    int64    // add
}

// blocking reports whether the server may park the request indefinitely.
func (r *request) blocking() bool { return r.op == opGet || r.op == opWait }

// label is the key an error about r should name.
func (r *request) label() string {
	if r.op == opWait {
		return joinKeys(r.keys)
	}
	return r.key
}

func appendBytes[T string | []byte](b []byte, s T) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// appendBody appends r's encoding, without the frame length.
func (r *request) appendBody(b []byte) []byte {
	b = append(b, r.op)
	b = binary.BigEndian.AppendUint64(b, r.id)
	switch r.op {
	case opSet:
		b = append(appendBytes(b, r.key), r.value...)
	case opGet, opDelete:
		b = appendBytes(b, r.key)
	case opWait:
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.keys)))
		for _, k := range r.keys {
			b = appendBytes(b, k)
		}
	case opAdd:
		b = binary.BigEndian.AppendUint64(appendBytes(b, r.key), uint64(r.delta))
	case opCAS:
		b = append(appendBytes(appendBytes(b, r.key), r.expected), r.value...)
	}
	return b
}

// frame returns r as a complete frame, ready for one Write.
func (r *request) frame() []byte {
	size := 4 + 1 + 8 + 4 + len(r.key) + 4 + len(r.expected) + len(r.value) + 8
	for _, k := range r.keys {
		size += 4 + len(k)
	}
	return endFrame(r.appendBody(make([]byte, 4, size)))
}

// endFrame fills in the length of a frame built on 4 reserved bytes.
func endFrame(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// decoder consumes a body; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("truncated frame: need %d bytes, have %d", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// bytes reads a length-prefixed field of at most limit bytes.
func (d *decoder) bytes(limit int) []byte {
	n := d.u32()
	if d.err == nil && n > uint32(limit) {
		d.fail("field of %d bytes exceeds %d", n, limit)
	}
	return d.take(int(n))
}

func (d *decoder) rest(limit int) []byte {
	if d.err == nil && len(d.b) > limit {
		d.fail("field of %d bytes exceeds %d", len(d.b), limit)
	}
	return d.take(len(d.b))
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// decodeRequest parses a request body. It never panics and never allocates
// more than the body's size, whatever the input; errors wrap ErrProtocol.
func decodeRequest(body []byte) (request, error) {
	d := decoder{b: body}
	r := request{op: d.u8(), id: d.u64()}
	if d.err != nil {
		return r, d.err
	}
	switch r.op {
	case opSet:
		r.key = string(d.bytes(MaxKeyLen))
		r.value = d.rest(MaxValueLen)
	case opGet, opDelete:
		r.key = string(d.bytes(MaxKeyLen))
	case opWait:
		n := d.u32()
		// Each key costs at least 4 bytes, so n cannot exceed what is left;
		// checking first keeps a forged count from sizing a huge slice.
		if d.err == nil && uint64(n)*4 > uint64(len(d.b)) {
			d.fail("wait for %d keys in %d bytes", n, len(d.b))
		}
		if d.err == nil {
			r.keys = make([]string, n)
			for i := range r.keys {
				r.keys[i] = string(d.bytes(MaxKeyLen))
			}
			if d.err == nil {
				if err := checkKeys(r.keys); err != nil {
					return r, err
				}
			}
		}
	case opAdd:
		r.key = string(d.bytes(MaxKeyLen))
		r.delta = int64(d.u64())
	case opCAS:
		r.key = string(d.bytes(MaxKeyLen))
		r.expected = d.bytes(MaxValueLen)
		r.value = d.rest(MaxValueLen)
	case opCancel, opPing:
	default:
		d.fail("unknown op %d", r.op)
	}
	return r, d.end()
}

func appendResponse(b []byte, id uint64, status byte, payload []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, id)
	return append(append(b, status), payload...)
}

func binary64(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

func decodeResponse(body []byte) (id uint64, status byte, payload []byte, err error) {
	d := decoder{b: body}
	id, status = d.u64(), d.u8()
	return id, status, d.rest(maxFrame), d.err
}

// statusOf maps an operation's error to the status byte that carries it.
func statusOf(err error) byte {
	switch {
	case errors.Is(err, ErrClosed):
		return statusClosed
	case errors.Is(err, ErrProtocol):
		return statusProtocol
	case errors.Is(err, ErrBadCounter):
		return statusBadCounter
	case errors.Is(err, ErrLimit):
		return statusLimit
	}
	return statusOther
}

// remoteError is an error reported by the server: its text, and the sentinel
// its status byte names.
type remoteError struct {
	sentinel error
	text     string
}

func (e *remoteError) Error() string { return e.text }
func (e *remoteError) Unwrap() error { return e.sentinel }

func errorOf(status byte, text []byte) error {
	var sentinel error
	switch status {
	case statusAuth:
		sentinel = ErrAuth
	case statusClosed:
		sentinel = ErrClosed
	case statusProtocol, statusVersion:
		sentinel = ErrProtocol
	case statusBadCounter:
		sentinel = ErrBadCounter
	case statusLimit:
		sentinel = ErrLimit
	case statusOther:
	default:
		return fmt.Errorf("%w: unknown status %d", ErrProtocol, status)
	}
	return &remoteError{sentinel: sentinel, text: string(text)}
}

func helloFrame(token string) []byte {
	b := append(make([]byte, 4), magic...)
	return endFrame(append(append(b, version), token...))
}

func decodeHello(body []byte) (ver byte, token []byte, err error) {
	d := decoder{b: body}
	if m := d.take(len(magic)); d.err == nil && string(m) != magic {
		d.fail("bad magic %q", m)
	}
	ver = d.u8()
	return ver, d.rest(MaxKeyLen), d.err
}

func welcomeFrame(status byte, text string) []byte {
	b := append(make([]byte, 4), magic...)
	return endFrame(append(append(b, version, status), text...))
}

func decodeWelcome(body []byte) (ver, status byte, text []byte, err error) {
	d := decoder{b: body}
	if m := d.take(len(magic)); d.err == nil && string(m) != magic {
		d.fail("bad magic %q: not a detcoll store", m)
	}
	ver, status = d.u8(), d.u8()
	return ver, status, d.rest(maxErrorText), d.err
}

// readFrame reads one frame of at most limit bytes. The buffer grows with the
// data actually received instead of trusting the header, so a peer that
// announces a large frame and stalls cannot make us allocate it.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > limit {
		return nil, fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrProtocol, n, limit)
	}
	b := make([]byte, min(n, 64<<10))
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, noEOF(err)
	}
	for len(b) < n {
		k := min(n-len(b), len(b)) // double per round: amortised O(n) copying
		b = slices.Grow(b, k)
		if _, err := io.ReadFull(r, b[len(b):len(b)+k]); err != nil {
			return nil, noEOF(err)
		}
		b = b[:len(b)+k]
	}
	return b, nil
}

// noEOF: inside a frame, end of stream is always unexpected.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
