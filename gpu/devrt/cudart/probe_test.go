package cudart

import "testing"

func TestParseDriverVersion(t *testing.T) {
	s := "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:17 UTC 2025\nGCC version: gcc 12\n"
	if v := parseDriverVersion(s); v != "580.65.06" {
		t.Fatalf("parsed %q", v)
	}
	if v := parseDriverVersion("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.82.07  Release Build"); v != "580.82.07" {
		t.Fatalf("open module: %q", v)
	}
}
