package torchref

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrite writes the references and checks the manifest: every file is
// there with the size its shape says, and the -0 cases do have -0s.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("DETCOLL_TORCHREF_DIR"); d != "" {
		dir = d // keep them, for running the Python checks by hand
	}
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	size := map[string]int64{"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4}
	kinds := map[string]bool{}
	for _, c := range m.Cases {
		kinds[c.Kind] = true
		for name, tn := range c.Tensors {
			st, err := os.Stat(filepath.Join(dir, tn.File))
			if err != nil {
				t.Fatalf("%s.%s: %v", c.Name, name, err)
			}
			if want := size[tn.DType] * int64(tn.Rows*tn.Cols); st.Size() != want {
				t.Fatalf("%s.%s: %d bytes, want %d", c.Name, name, st.Size(), want)
			}
		}
		if strings.HasPrefix(c.Name, "attn_negzero") {
			if c.NegZero["out"] == 0 {
				t.Errorf("%s: no -0 in the output", c.Name)
			}
			if c.DType == "bf16" && c.NegZero["dv"] == 0 {
				t.Errorf("%s: no -0 in dV", c.Name)
			}
		}
	}
	for _, k := range []string{"matmul", "linear", "ffn", "attn", "formulas"} {
		if !kinds[k] {
			t.Errorf("no %s case", k)
		}
	}
}
