#!/bin/bash
# alternate DETCOLL_BIND_TO=none and auto with detcoll bench; prints medians per row
R=${R:-3}; SZ=${SZ:-4096,65536,1048576,16777216}
out=/tmp/bindab; mkdir -p $out; rm -f $out/*.json
for r in $(seq $R); do for w in 2 4; do for tr in shm tcp; do for b in none auto; do
  it=20; DETCOLL_TRANSPORT=$tr DETCOLL_BIND_TO=$b bin/detcoll bench --device cpu --nproc-per-node $w --dtype fp32 --algorithms auto --size-bytes $SZ --iterations $it --samples 3 --warmup 20 --output $out/$tr-w$w-$b-r$r.json >/dev/null 2>&1 || echo fail $tr $w $b
done; done; done; done
python3 - <<'PY'
import json,glob,statistics as st,collections
d=collections.defaultdict(list)
for f in glob.glob('/tmp/bindab/*.json'):
    tr,w,b,r=f.split('/')[-1][:-5].split('-')
    for row in json.load(open(f))['rows']:
        d[(tr,w,row['operation'],row['input_bytes'],b)]+=row['deterministic']['samples_us']
keys=sorted({k[:4] for k in d})
for k in keys:
    a=d[k+('none',)]; b=d[k+('auto',)]
    print('%s %s %-14s %9d none %9.1f [%7.1f-%7.1f] auto %9.1f [%7.1f-%7.1f] auto/none %.2f'%(k[0],k[1],k[2],k[3],st.median(a),min(a),max(a),st.median(b),min(b),max(b),st.median(b)/st.median(a)))
PY
