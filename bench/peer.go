package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/detcoll/detcoll/dtype"
)

// PeerSchemaV1 is the schema of a peer's figures (docs/contract.md, "Peer
// figures"): what a script that runs Open MPI, Gloo or any other library
// writes for `detcoll bench --peer`.
const PeerSchemaV1 = "detcoll.peer.v1"

// Peer is another library's measurements of the same collectives:
//
//	{"schema": "detcoll.peer.v1", "name": "Open MPI 4.1 shm", "world_size": 4,
//	 "rows": [{"op": "all_reduce", "dtype": "fp32", "bytes": 4096, "median_us": 1.5}]}
//
// bytes is the per-rank input, as detcoll's input_bytes (see Op); world_size
// is optional and, when present, must equal the run's.
type Peer struct {
	Schema    string    `json:"schema"`
	Name      string    `json:"name"`
	WorldSize int       `json:"world_size,omitempty"`
	Command   string    `json:"command,omitempty"` // how the figures were made (free text)
	Rows      []PeerRow `json:"rows"`
}

// PeerRow is one of the peer's measurements.
type PeerRow struct {
	Op       Op      `json:"op"`
	DType    string  `json:"dtype"`
	Bytes    int64   `json:"bytes"`
	MedianUS float64 `json:"median_us"`
}

// PeerInfo is the peer as recorded in a report.
type PeerInfo struct {
	Name      string `json:"name"`
	File      string `json:"file"`
	WorldSize int    `json:"world_size,omitempty"`
}

// ReadPeer reads and checks a peer file.
func ReadPeer(path string) (*Peer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := ParsePeer(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParsePeer decodes and checks a peer's figures: the schema, a name, and
// every row a known operation and dtype, positive bytes (whole elements)
// and a positive finite median; no two rows for the same (op, dtype, bytes).
func ParsePeer(b []byte) (*Peer, error) {
	var p Peer
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("not a peer file: %w", err)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if p.Schema != PeerSchemaV1 {
		bad("schema %q, want %q", p.Schema, PeerSchemaV1)
	}
	if p.Name == "" {
		bad("name is empty (say what the peer is, e.g. \"Open MPI 4.1 shm\")")
	}
	if p.WorldSize < 0 {
		bad("world_size %d", p.WorldSize)
	}
	if len(p.Rows) == 0 {
		bad("no rows")
	}
	seen := map[[3]string]bool{}
	for i, r := range p.Rows {
		dt, err := dtype.Parse(r.DType)
		switch {
		case !r.Op.Valid():
			bad("row %d: op %q is not all_reduce, all_gather or reduce_scatter", i, r.Op)
		case err != nil || !dt.Valid():
			bad("row %d: dtype %q", i, r.DType)
		case r.Bytes <= 0 || r.Bytes%int64(dt.Size()) != 0:
			bad("row %d: bytes %d is not a positive whole number of %s elements", i, r.Bytes, r.DType)
		case !(r.MedianUS > 0) || math.IsInf(r.MedianUS, 0):
			bad("row %d: median_us %g is not positive", i, r.MedianUS)
		}
		k := [3]string{string(r.Op), dt.String(), fmt.Sprint(r.Bytes)}
		if seen[k] {
			bad("row %d: a second row for %s %s %d bytes", i, r.Op, r.DType, r.Bytes)
		}
		seen[k] = true
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &p, nil
}

// Lookup returns the peer's median for (op, dtype, input bytes).
func (p *Peer) Lookup(op Op, dt string, bytes int64) (float64, bool) {
	want, err := dtype.Parse(dt)
	if err != nil {
		return 0, false
	}
	for _, r := range p.Rows {
		if d, err := dtype.Parse(r.DType); err == nil && d == want && r.Op == op && r.Bytes == bytes {
			return r.MedianUS, true
		}
	}
	return 0, false
}

// Apply fills row's peer columns when the peer has its (op, dtype, bytes).
func (p *Peer) Apply(row Row) Row {
	if us, ok := p.Lookup(row.Operation, row.DType, row.InputBytes); ok {
		row.PeerMedianUS = us
		if row.Deterministic.MedianUS > 0 {
			row.LatencyRatioVsPeer = row.Deterministic.MedianUS / us
		}
	}
	return row
}

// SetPeer records the peer in the report and fills the rows it has.
func (r *Report) SetPeer(p *Peer, file string) {
	r.Peer = &PeerInfo{Name: p.Name, File: file, WorldSize: p.WorldSize}
	for i := range r.Rows {
		r.Rows[i] = p.Apply(r.Rows[i])
	}
}
