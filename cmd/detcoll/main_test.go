package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestNormalizeListFlags(t *testing.T) {
	got := normalizeListFlags([]string{"bench", "--operations", "all_reduce", "all_gather", "--size-bytes=4096", "65536", "--dtype", "bf16", "--", "x", "--size-bytes", "1"})
	want := []string{"bench", "--operations=all_reduce,all_gather", "--size-bytes=4096,65536", "--dtype", "bf16", "--", "x", "--size-bytes", "1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func runReduce(t *testing.T, args ...string) error {
	t.Helper()
	cmd := reduceCmd()
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	return cmd.Execute()
}

func TestReduceCommand(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	// W=3 fp32, one element each: (1e8 + 1) + -1e8 = 0 under the tree.
	data := append(append(f32le(1), f32le(1e8)...), f32le(-1e8)...)
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runReduce(t, "--dtype", "fp32", "--world-size", "3", "--in", in, "--out", out); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, f32le(0)) {
		t.Fatalf("got %x", got)
	}
	for name, args := range map[string][]string{
		"size not W×count": {"--dtype", "fp32", "--world-size", "2", "--in", in, "--out", out},
		"unknown dtype":    {"--dtype", "int8", "--world-size", "3", "--in", in, "--out", out},
		"bad accumulate":   {"--dtype", "bf16", "--accumulate", "fp8", "--world-size", "3", "--in", in, "--out", out},
		"W < 1":            {"--dtype", "fp32", "--world-size", "0", "--in", in, "--out", out},
		"missing file":     {"--dtype", "fp32", "--world-size", "3", "--in", filepath.Join(dir, "nope"), "--out", out},
		"no --in":          {"--dtype", "fp32", "--world-size", "3", "--out", out},
	} {
		if err := runReduce(t, args...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func f32le(v float32) []byte {
	return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))
}
