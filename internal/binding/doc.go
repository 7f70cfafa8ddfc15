// Package binding is the vendor-neutral half of detcoll's dlopened GPU
// library bindings (internal/cuda, internal/hip, internal/nvrtc,
// internal/hiprtc, internal/cublas, internal/ccl): what every binding does
// the same way, written once.
//
//   - Table: a library's symbol table (documented API name, exported
//     candidates best first, optional flag), opened through internal/dl and
//     resolved in order. A missing required symbol fails the load; a missing
//     optional one leaves its pointer 0 (Have reports it).
//   - Error and LogError: the error type of a binding, parameterised by the
//     binding's result type and a zero-size Vendor that names it ("cuda: …")
//     and supplies its ErrUnavailable. Each binding declares its Error as an
//     alias of one instantiation, so errors.Is/As and the messages are what
//     they were when each binding had its own copy.
//   - Names: the result code → name mapping, with the binding's fallback
//     format for codes it does not list.
//
// The symbol lists, result names and C trampolines themselves are written by
// internal/bindgen from one declarative file per library (symbols.txt);
// docs/architecture.md ("Generated bindings") says why.
//
// The package is pure Go, imports neither vendor and names no vendor
// library (internal/buildcheck's TestNeutral).
package binding
