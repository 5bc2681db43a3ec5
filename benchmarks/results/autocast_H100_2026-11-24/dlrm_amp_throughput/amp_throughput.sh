# dlrm train throughput, fp32 vs --amp, tuning cache filled by a first process of each configuration
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FUSEDMLP_TUNING_CACHE=/tmp/tc
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for bs in 9000 4500; do
  for amp in "" "--amp"; do
    tag=${bs}${amp:+_amp}
    s=$(date +%s); timeout 150 python3 -m fusedmlp.cli dlrm train --quiet --batch-size $bs --steps 200 $amp > /dev/null 2>&1; echo "warm $tag $(( $(date +%s) - s )) s"
    timeout 120 python3 -m fusedmlp.cli dlrm train --quiet --batch-size $bs --steps 20000 $amp --metrics-out $OUT/fused_$tag.json > /dev/null 2>&1
    timeout 100 python3 -m fusedmlp.cli dlrm train --quiet --impl eager --batch-size $bs --steps 400 $amp --metrics-out $OUT/eager_$tag.json > /dev/null 2>&1
    python3 -c "
import json
for impl in ('fused', 'eager'):
    try: r = json.load(open('$OUT/'+impl+'_$tag.json'))
    except Exception as e: print(impl, '$tag', 'missing', e); continue
    v = r['validation']; print(impl, '$tag', 'graph' if r['cuda_graph'] else 'plain', r['steps'], 'steps', round(r['samples_per_s']), 'samples/s', 'auc', round(v['auc'], 4), 'logloss', round(v['log_loss'], 4))
"
  done
done
