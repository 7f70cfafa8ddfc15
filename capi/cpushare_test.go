//go:build cgo

package main

import (
	"runtime"
	"sync"
	"testing"
)

// shareCPUs sets GOMAXPROCS to the host's CPUs / the local world size,
// only when GOMAXPROCS is unset and more than one rank runs on the host,
// and only once.
func TestShareCPUs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	share := max(1, runtime.NumCPU()/2)
	for _, tc := range []struct {
		env  map[string]string
		tcp  bool
		want int // 0: unchanged
	}{
		{map[string]string{"LOCAL_WORLD_SIZE": "2"}, true, share},
		{map[string]string{"LOCAL_WORLD_SIZE": "2"}, false, 0}, // shared memory: Go's default
		{map[string]string{"DETCOLL_LOCAL_WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}, true, share},
		{map[string]string{"LOCAL_WORLD_SIZE": "2", "GOMAXPROCS": "5"}, true, 0},
		{map[string]string{"LOCAL_WORLD_SIZE": "1"}, true, 0},
		{map[string]string{}, true, 0},
		{map[string]string{"LOCAL_WORLD_SIZE": "10000"}, true, 1},
	} {
		cpuShare = sync.Once{}
		const marker = 7 // a value shareCPUs never picks here unless told to
		runtime.GOMAXPROCS(marker)
		shareCPUs(func(k string) string { return tc.env[k] }, tc.tcp)
		got, want := runtime.GOMAXPROCS(0), tc.want
		if want == 0 {
			want = marker
		}
		if got != want {
			t.Errorf("env %v: GOMAXPROCS %d, want %d", tc.env, got, want)
		}
		// Once per process: a second call changes nothing.
		runtime.GOMAXPROCS(marker)
		shareCPUs(func(k string) string { return map[string]string{"LOCAL_WORLD_SIZE": "2"}[k] }, true)
		if got := runtime.GOMAXPROCS(0); got != marker {
			t.Errorf("env %v: a second shareCPUs set GOMAXPROCS to %d", tc.env, got)
		}
	}
	cpuShare = sync.Once{}
}

func TestEnvOverTCP(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, false},
		{map[string]string{"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, true},
		{map[string]string{"DETCOLL_WORLD_SIZE": "8", "DETCOLL_LOCAL_WORLD_SIZE": "4"}, true},
		{map[string]string{"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "DETCOLL_TRANSPORT": "tcp"}, true},
		{map[string]string{"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "DETCOLL_TRANSPORT": " TCP"}, true},
		{map[string]string{"WORLD_SIZE": "4", "DETCOLL_TRANSPORT": "shm"}, false},
		{map[string]string{}, false},
	} {
		if got := envOverTCP(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("env %v: envOverTCP %v, want %v", tc.env, got, tc.want)
		}
	}
}
