// Command capi is libdetcoll.so, detcoll's C API, built with
//
//	go build -buildmode=c-shared -o bin/libdetcoll.so ./capi
//
// Its public header is include/detcoll.h (hand-written and stable; the header
// that cgo writes next to the library is not the public one). Python uses
// the library through python/detcoll (ctypes); docs/nccl-mapping.md maps
// every NCCL call to its detcoll twin.
//
// # Design
//
// Handles: a detcollComm_t is not a Go pointer. It is (id<<4 | 0xD), where
// id indexes a table of communicators and is never reused, so a NULL handle
// or a forged one (any value not ending in 0xD, such as a real pointer) is
// detcollInvalidArgument and a destroyed one detcollClosed. Go code receives
// handles as uintptr_t (the ABI of a pointer on every supported platform) and
// never holds a Go pointer in C memory or a C-typed pointer to a handle.
//
// Buffers: host buffers are C memory, wrapped with unsafe.Slice for the
// duration of one call only (the cgo pointer rules allow Go to use C memory;
// detcoll.Comm retains no buffer after a collective returns). Before use,
// the first and last byte of each buffer are read with
// debug.SetPanicOnFault, so an unmapped pointer (typically a device pointer
// passed to a Host function) is detcollInvalidArgument, not a crash.
//
// Panics: every exported function recovers a panic of its own goroutine into
// detcollInternalError and records the panic value and stack as the last
// error. (A panic in a goroutine the library started cannot be recovered;
// none is expected.)
//
// Errors: the detail message of a failure is recorded twice: in a
// thread-local C buffer of the calling thread (cgo runs an exported function
// on its caller's thread, so C thread-local storage written during the call
// is the caller's), and on the communicator. detcollGetLastError(NULL) reads
// the first, detcollGetLastError(comm) the second.
//
// Unique ids (detcollGetUniqueId / detcollCommInitRank): 128 bytes,
// "DCID", a version byte (1), the address length, two zero bytes, a 16-byte
// store token, a 16-byte job key, the store address ("host:port"), zeros.
// The first GetUniqueId in a process serves a store.Server on
// $DETCOLL_TCP_HOST (127.0.0.1 by default) and an ephemeral port with a
// random token, for the life of the process; each id gets a random job key,
// and its ranks meet under the store keys "detcoll/uid/<key hex>/...": they
// check that they agree on nranks and that no rank joins twice, then connect
// a TCP mesh (transport/tcp). A rank that fails to join publishes why, so
// the others stop waiting.
//
// Environment communicators (detcollCommInitFromEnv): the first call joins
// the job with cluster.Init (store keys "detcoll/world/..."); later calls in
// the same process build further communicators over the same store
// ("detcoll/world/<n>/..."). The store is released (cluster.Job.Close) when
// the last of them is destroyed.
//
// Caller's stores (detcollCommInitStore): the caller passes a detcollStore,
// C callbacks set/get/add/del over a key-value store it already has (the
// torch backend passes torch's c10d Store this way). storecb.go copies the
// struct and wraps it as a store.Store (get is polled, each call bounded by
// 200 ms and a non-blocking answer followed by a backoff of 1 to 50 ms, so
// cancellation and deadlines stay the library's); the ranks then connect
// the TCP mesh under the caller's prefix, after checking through one
// counter that no more than nranks ranks join it. The callbacks are used
// until the communicator is destroyed (device attach needs the store).
//
// Data movement (exports_more.go): Broadcast, Scatter, Gather, AllToAllv,
// Send/Recv and Barrier on host memory, over the Go API's Comm methods
// (movement.go of package detcoll for AllToAll, Gather, Send, Recv); every
// datatype is accepted, only its size matters.
//
// Device collectives: detcollAllReduce, detcollAllGather and
// detcollReduceScatter check their arguments, then dispatch to the device
// backend registered with registerDeviceBackend (from an init function of a
// file of this package); without one they return detcollUnsupported.
// Device pointers and streams arrive as uintptr_t and stay integers in Go
// (cuda.DevicePtr, cuda.Stream). See device.go for the interface. The CUDA
// backend (device_cuda.go, in every cgo build unless -tags
// detcoll_nodevice) makes a gpu/devcomm communicator on a communicator's
// first device call, from the communicator and how it was made (its origin:
// store, launch environment, store prefix, accumulate mode), and enqueues
// every call on the caller's stream (devcomm.OnStream) without
// synchronising. Where the CUDA driver, NCCL or NVRTC cannot be loaded the
// attach fails, on every rank alike (devcomm.New is collective and is
// always called), with detcollUnsupported naming the missing library.
//
// The header is the single source of the C types and constants: results.go
// includes it with DETCOLL_TYPES_ONLY (its prototypes would clash with the
// ones cgo generates, which differ only in const and in uintptr_t for
// handles and device pointers). The go command does not track headers
// outside the package directory, so after changing a constant in
// include/detcoll.h rebuild with go build -a (or go clean -cache).
//
// Built without cgo, this command only prints that it was.
package main
