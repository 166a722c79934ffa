#!/bin/bash
# On the GPU machine, from the repository root, after bench/offline/setup.sh's parts have arrived (stage.py
# --tree REV): `[SEEDS="0 1"] [LOCAL=96] [PROCS=3] [WORKERS=4] [PRIOR=docs/runs/FOLDER] bash bench/offline/run_seeds.sh REV SECONDS [UNTIL]` runs the seeds file's seeds
# side by side (each its own process and PDBGYM_HOME) for SECONDS at most, GPU load and memory logged every
# 20 s, then writes every report and the pooled one from what is there and packs the results (no weights, no
# token caches) and the logs into $OUT. A later call resumes the folders where the last one left them
# (docs/runs/2026-12-06-smollm2-ladder-seeds-run2.md). PHASED=1: the seeds train side by side, then play their
# campaigns one after another.
REV=$1; SECS=$2; UNTIL=$3
export PDBGYM_TREE=/tmp/tree-$REV
source bench/offline/setup.sh .offline
cd "$PDBGYM_TREE" || exit 1
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader; nproc
python3 -c "import pdbgym, torch, transformers, trl; print(pdbgym.__file__, torch.__version__, transformers.__version__, trl.__version__)" || exit 1
pgrep -f monitor-loop >/dev/null || (exec -a monitor-loop bash -c 'while true; do echo "$(date +%T) $(cut -d" " -f1-3 /proc/loadavg) $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; sleep 20; done' >> /tmp/monitor.log 2>&1 &)
# PRIOR: a folder of finished seeds from an earlier session (docs/runs/...), copied in where /tmp/seeds lacks them
for d in ${PRIOR:+"$OLDPWD/$PRIOR"/seed-*}; do [ -d "/tmp/seeds/$(basename "$d")" ] || { mkdir -p /tmp/seeds; cp -r "$d" /tmp/seeds/; }; done
DEADLINE=$(( $(date +%s) + SECS ))
# one seed's `experiment run` up to stage $2 in what is left of SECS (no stage starts in its last 80 s)
run_seed() {
  local left=$(( DEADLINE - $(date +%s) ))
  [ "$left" -gt 90 ] || return 0
  PDBGYM_HOME=/tmp/home-$1 timeout -s INT -k 20 "$left" python3 -m pdbgym.cli experiment run experiments/smollm2-ladder-seeds.toml \
    --out /tmp/seeds --seeds $1 --device cuda --workers "${WORKERS:-4}" --local-episodes "${LOCAL:-0}" --local-processes "${PROCS:-1}" ${2:+--until $2} \
    --minutes "$(python3 -c "print(round(($left - 80) / 60, 2))")" >> /tmp/seed-$1.log 2>&1
}
if [ -n "$PHASED" ]; then
  # PHASED=1: the seeds train side by side (the GPU and the cores have room for that), then play their held-out
  # campaigns one after another, each with all the cores, so the first seed's campaign ends before the next starts
  for s in ${SEEDS:-0 1 2}; do run_seed $s matched & done
  wait
  for s in ${SEEDS:-0 1 2}; do run_seed $s "$UNTIL"; done
else
  for s in ${SEEDS:-0 1 2}; do run_seed $s "$UNTIL" & done
  wait
fi
PDBGYM_HOME=/tmp/home-0 timeout 60 python3 -m pdbgym.cli experiment run experiments/smollm2-ladder-seeds.toml --out /tmp/seeds \
  --until tasks > /tmp/pool.log 2>&1
for s in ${SEEDS:-0 1 2}; do echo "== seed $s"; grep -E "^\[" /tmp/seed-$s.log | tail -8; done
tail -4 /tmp/monitor.log; cat /tmp/seeds/pooled.md | head -30
cd /tmp/seeds && tar --exclude=adapters --exclude='checkpoint-*' --exclude='*.safetensors' --exclude='*.pt' \
  --exclude='*.pth' --exclude=tokenizer.json --exclude=cache --exclude=caches --exclude=corpus --exclude=merged -cJf /tmp/res.tar.xz . 
(cd /tmp && tar -cJf "$OUT/logs.tar.xz" $(ls seed-*.log pool.log monitor.log 2>/dev/null))
split -b 15M /tmp/res.tar.xz "$OUT/res.tar.xz."
ls -la "$OUT"; du -sh /tmp/seeds/seed-*/eval 2>/dev/null
