"""Tabulates run.sh's raw results: median (min-max) µs per W, op and size."""
import glob, json, os, statistics, sys

out = sys.argv[1]
samples = {}  # (peer, w, op, bytes) -> [µs]
for path in glob.glob(os.path.join(out, "raw", "*")):
    name = os.path.basename(path)
    peer = name.split("-")[0]
    if name.endswith(".jsonl"):
        for line in open(path):
            r = json.loads(line)
            if r["dtype"] == "fp32":
                samples.setdefault(("mpi", r["world_size"], r["op"], r["bytes"]), []).extend(r["samples_us"])
    elif name.endswith(".json"):
        d = json.load(open(path))
        for r in d["rows"]:
            if not (r["repeat_bitwise"] and r["oracle_bitwise"]):
                sys.exit(f"{name}: {r['operation']} {r['input_bytes']} not bitwise")
            samples.setdefault((peer, d["world_size"], r["operation"], r["input_bytes"]), []).extend(
                r["deterministic"]["samples_us"])

def cell(k):
    v = samples.get(k)
    if not v:
        return "—", None
    m = statistics.median(v)
    return f"{m:.0f} ({min(v):.0f}–{max(v):.0f})", m

def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"

print(open(os.path.join(out, "meta.txt")).read())
print("| W | op | bytes/rank | checksum always µs | checksum auto (none on loopback) µs | Open MPI TCP µs | auto / always | auto / MPI |")
print("|---|---|---|---|---|---|---|---|")
keys = sorted({k[1:] for k in samples}, key=lambda k: (k[0], k[1], k[2]))
for w, op, b in keys:
    a, am = cell(("always", w, op, b))
    u, um = cell(("auto", w, op, b))
    m, mm = cell(("mpi", w, op, b))
    r1 = f"{um / am:.2f}" if um and am else "—"
    r2 = f"{um / mm:.2f}" if um and mm else "—"
    print(f"| {w} | {op} | {size(b)} | {a} | {u} | {m} | {r1} | {r2} |")
