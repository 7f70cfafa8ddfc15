// Package pytorchtest runs the PyTorch backend's checks
// (python/tests/torch_backend_check.py) under torchrun at W = 1, 2, 3, 4 on
// CPU, from go test: every collective and ReduceOp of the "detcoll"
// torch.distributed backend, async work, groups, second-thread refusal, bad
// input, faults (mismatch, hung and dead peers) and DDP bit-identity across
// bucket sizes and across two runs. All bits are compared raw by the
// script; this package only starts it and reads its verdicts.
//
// The tests need /usr/bin/python3 with torch (DETCOLL_PYTHON overrides the
// interpreter) and cgo (to build libdetcoll.so). Without them they skip,
// saying why, unless DETCOLL_REQUIRE_TORCH=1, when they fail instead (CI).
package pytorchtest
