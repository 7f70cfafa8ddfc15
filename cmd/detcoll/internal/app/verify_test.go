package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	rows, err := Verify(ctx, VerifyOptions{WorldSizes: []int{1, 3}, Counts: []int{1, 7, 130}, Out: &out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// 2 transports × 2 world sizes × ((bf16, fp16: 2 modes; fp32, fp64: 1) ×
	// (2 algorithms × 3 ops + the all_reduce and reduce_scatter of
	// recursive_doubling and halving_doubling) + 4 all_gather rows)
	if want := 2 * 2 * (6*(2*3+2*2) + 4); len(rows) != want {
		t.Fatalf("%d rows, want %d", len(rows), want)
	}
	if !strings.Contains(out.String(), "checks, 0 failed") {
		t.Fatalf("table: %s", out.String())
	}
}

func TestVerifyFailsLoudly(t *testing.T) {
	var out bytes.Buffer
	if n := printVerify(&out, []VerifyResult{{Transport: "x", Pass: false, Detail: "boom"}}); n != 1 || !strings.Contains(out.String(), "FAIL: boom") {
		t.Fatalf("failed=%d out=%s", n, out.String())
	}
	if _, err := Verify(context.Background(), VerifyOptions{Transports: []string{"carrier-pigeon"}, WorldSizes: []int{2}}); err == nil {
		t.Fatal("unknown transport accepted")
	}
}

func TestResolveDevice(t *testing.T) {
	if d, err := ResolveDevice("cpu"); err != nil || d != "cpu" {
		t.Fatalf("cpu: %v %v", d, err)
	}
	if _, err := ResolveDevice("tpu"); err == nil {
		t.Fatal("tpu accepted")
	}
}
