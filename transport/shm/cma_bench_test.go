//go:build linux

package shm

import (
	"fmt"
	"os"
	"testing"
	"unsafe"
)

// BenchmarkReadRemote is process_vm_readv on this process against copy, same sizes.
func BenchmarkReadRemote(b *testing.B) {
	for _, n := range []int{1 << 20, 16 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		b.Run(fmt.Sprintf("cma/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				if err := readRemote(os.Getpid(), dst, uintptr(unsafe.Pointer(&src[0]))); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("copy/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}
