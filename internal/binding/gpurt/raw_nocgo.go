//go:build !cgo

package gpurt

import "github.com/detcoll/detcoll/internal/binding"

// Without cgo no trampoline can run; every one reports CodeUnavailable.
const u = binding.CodeUnavailable

func cH(uintptr, uintptr) int32                          { return u }
func cHH(uintptr, uintptr, uintptr) int32                { return u }
func cHHU(uintptr, uintptr, uintptr, uint32) int32       { return u }
func cHI(uintptr, uintptr, int32) int32                  { return u }
func cHPH(uintptr, uintptr, *uintptr) int32              { return u }
func cHPI(uintptr, uintptr, *int32) int32                { return u }
func cCreate(uintptr, *uintptr, uint32) int32            { return u }
func cElapsed(uintptr, *float32, uintptr, uintptr) int32 { return u }
func cModLoad(uintptr, *uintptr, []byte) int32           { return u }
func cGetFn(uintptr, *uintptr, uintptr, string) int32    { return u }
func cFuncAttr(uintptr, *int32, int32, uintptr) int32    { return u }
func cInstantiate(uintptr, *uintptr, uintptr) int32      { return u }
