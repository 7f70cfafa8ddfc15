//go:build !cgo

package gpurt

import (
	"unsafe"

	"github.com/detcoll/detcoll/internal/binding"
)

// Without cgo no trampoline can run; every one reports CodeUnavailable.
const u = binding.CodeUnavailable

func cH(uintptr, uintptr) int32                                                    { return u }
func cHH(uintptr, uintptr, uintptr) int32                                          { return u }
func cHHU(uintptr, uintptr, uintptr, uint32) int32                                 { return u }
func cHI(uintptr, uintptr, int32) int32                                            { return u }
func cHPH(uintptr, uintptr, *uintptr) int32                                        { return u }
func cHPI(uintptr, uintptr, *int32) int32                                          { return u }
func cCreate(uintptr, *uintptr, uint32) int32                                      { return u }
func cElapsed(uintptr, *float32, uintptr, uintptr) int32                           { return u }
func cModLoad(uintptr, *uintptr, []byte) int32                                     { return u }
func cGetFn(uintptr, *uintptr, uintptr, string) int32                              { return u }
func cFuncAttr(uintptr, *int32, int32, uintptr) int32                              { return u }
func cInstantiate(uintptr, *uintptr, uintptr) int32                                { return u }
func cMemInfo(uintptr, *uint64, *uint64) int32                                     { return u }
func cAlloc(uintptr, ABI, *DevicePtr, int) int32                                   { return u }
func cDptr(uintptr, ABI, DevicePtr) int32                                          { return u }
func cAddrRange(uintptr, ABI, *DevicePtr, *uint64, DevicePtr) int32                { return u }
func cAllocHost(uintptr, ABI, *unsafe.Pointer, int) int32                          { return u }
func cFreeHost(uintptr, unsafe.Pointer) int32                                      { return u }
func cHtoD(uintptr, ABI, DevicePtr, unsafe.Pointer, int) int32                     { return u }
func cHtoDAsync(uintptr, ABI, DevicePtr, unsafe.Pointer, int, uintptr) int32       { return u }
func cDtoH(uintptr, ABI, unsafe.Pointer, DevicePtr, int) int32                     { return u }
func cDtoHAsync(uintptr, ABI, unsafe.Pointer, DevicePtr, int, uintptr) int32       { return u }
func cDtoD(uintptr, ABI, DevicePtr, DevicePtr, int, uintptr, bool) int32           { return u }
func cMemset(uintptr, ABI, DevicePtr, byte, int, uintptr, bool) int32              { return u }
func cIpcGet(uintptr, ABI, *[64]byte, DevicePtr) int32                             { return u }
func cIpcOpen(uintptr, ABI, *DevicePtr, *[64]byte, uint32) int32                   { return u }
func cLaunch(uintptr, uintptr, Dim3, Dim3, uint32, uintptr, []byte, []int32) int32 { return u }
