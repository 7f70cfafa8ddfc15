// Package buildcheck holds no code, only the build-isolation tests of
// docs/rocm.md: with Go build constraints at the import sites of the GPU
// packages (cmd/detcoll/internal/app/cuda.go, cmd/detcoll/internal/app/rocm.go,
// capi/device_cuda.go), the binaries (cmd/detcoll, capi) carry
//
//   - by default (cgo): both CUDA and ROCm, and pick at run time;
//   - with -tags cuda: CUDA only, no ROCm package and no ROCm library name;
//   - with -tags rocm: ROCm only, no CUDA package and no CUDA library name
//     (libcuda, libnvrtc, libnccl);
//   - with -tags cuda,rocm: both;
//   - built with CGO_ENABLED=0: neither.
//
// The tests check each with `go list -deps` and by building cmd/detcoll
// and searching the binary for the libraries' names and entry points;
// TestNeutral checks that the pure-Go packages both bindings share
// (neutralPackages) import neither vendor.
package buildcheck
