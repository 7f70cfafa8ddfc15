"""Print a compact table of a detcoll.bench.v1 report: one line per row."""
import json
import sys

rep = json.load(open(sys.argv[1]))
name = sys.argv[1].rsplit("/", 1)[-1]
print(f"# {name} graph={rep['graph']} W={rep['world_size']} extra={rep.get('extra', {})}")
for r in rep["rows"]:
    ok = "ok" if r["oracle_bitwise"] and r["repeat_bitwise"] else "BITS!"
    d, n = r["deterministic"], r["native"]
    print(f"{r['operation'][:6]:6} {r['algorithm'][:8]:8} {r['input_bytes']:>10} det {d['median_us']:9.1f} "
          f"[{d['min_us']:.1f},{d['max_us']:.1f}] nccl {n['median_us']:9.1f} x{r['latency_ratio_vs_native']:.3f} {ok}")
