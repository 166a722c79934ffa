#!/bin/bash
# On the GPU machine, from the repository root, once bench/offline/setup.sh's parts have all arrived (the GGUF
# too, for the short experiment): `PARTS="1 2" bash bench/offline/decode_levers.sh` takes issue 41's decode and
# step measurements, the parts named (a call runs at most 10 minutes: parts 1 and 2 fit one, 3 and 4 need one
# each), everything in $OUT:
# 1. bench/compiled_step.py: one decode step at SmolLM2-135M's shape (48 x 2,048) captured, compiled without a
#    graph, and compiled inside the engine's graph, each timed on the device; where the compiled step fails,
#    its traceback (compiled_step-VARIANT.json; VARIANTS="engine static whole" tries other ways of
#    compiling it, bench/compiled_step.py --variant). About 2 minutes a variant, most of it the compile.
# 2. the GPU engine tests, the compiled step's included, with the engine's warnings shown (gpu-tests.log).
# 3. bench/engine_throughput.py decode --compiled at both shapes (decode.json): the captured and the compiled
#    step against HF generate at the same batch, log-probs against a plain forward pass in fp32 and bf16.
# 4. the short experiment's GRPO stage at this tree's defaults (`--until grpo`, within
#    MINUTES, default 8.5): its steps.jsonl (every step's split) and report.md; GRPO_KEYS="compile_decode = true;
#    trace_step = 6" runs a copy of the file with those [grpo] keys (outside the settings digest), and a
#    traced step's table (trace/step-N.txt) comes back too. RUN, FROM, UNTIL and TAG (part 4's comment) run
#    several GRPO arms from one SFT stage: `UNTIL=sft RUN=/tmp/sft0`, then `FROM=/tmp/sft0 RUN=/tmp/new TAG=new-`.
source bench/offline/setup.sh .offline
set -o pipefail
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
part() { [[ " ${PARTS:-1 2} " == *" $1 "* ]]; }
part 1 && for v in ${VARIANTS:-engine}; do timeout ${PROBE_S:-300} python3 bench/compiled_step.py --device cuda \
  --variant "$v" --json "$OUT/compiled_step-$v.json" 2>"$OUT/compiled_step-$v.log" | grep -v '"[a-z_]*_error"'
  grep -h -m3 -E "Error|error:" "$OUT/compiled_step-$v.json" | cut -c1-600; done
part 2 && { timeout 300 python3 -m pytest -q -p no:cacheprovider tests/engine/test_engine_gpu.py -o log_cli=true \
  --log-cli-level=WARNING > "$OUT/gpu-tests.log" 2>&1; tail -3 "$OUT/gpu-tests.log"; }
part 3 && timeout 560 python3 bench/engine_throughput.py --json "$OUT/decode.json" decode --device cuda --compiled \
  > "$OUT/decode.log" 2>&1 && python3 -c "
import json; d = json.load(open('$OUT/decode.json'))
for shape, row in d.items():
    if isinstance(row, dict): print(shape, {k: v.get('tok_s', v) if isinstance(v, dict) else v for k, v in row.items()})"
if part 4; then
  # GRPO_KEYS (e.g. "compile_decode = true; trace_step = 6") adds [grpo] keys outside the settings digest to a
  # copy of the file: a lever measured at the same settings. RUN (default /tmp/short) is the experiment's
  # folder; FROM, a folder to start it from (one run --until sft: arms that share its SFT stage, GRPO's start,
  # differ only in their GRPO); UNTIL (default grpo) the last stage; TAG names the files brought back; SEED, a
  # training seed other than the file's (`--seeds SEED`: the folder RUN/seed-SEED, the same tasks and split).
  TOML=experiments/smollm2-ladder-short.toml RUN=${RUN:-/tmp/short}
  if [ -n "$GRPO_KEYS" ]; then
    python3 -c "import sys; t = open('$TOML').read(); k = '\n'.join(x.strip() for x in sys.argv[1].split(';'))
print(t.replace('\n[grpo]\n', '\n[grpo]\n' + k + '\n', 1), end='')" "$GRPO_KEYS" > /tmp/short-levers.toml
    TOML=/tmp/short-levers.toml
  fi
  [ -n "$FROM" ] && [ ! -e "$RUN" ] && cp -a "$FROM" "$RUN"
  # SPY_S=30: once GRPO has logged two steps (the first compiles), py-spy records SPY_S seconds of every thread
  # that holds the interpreter's lock (the staged extra/ wheel, or a py-spy on the machine); TAG-gil.txt and its
  # summary by thread (bench/gil_threads.py) come back: who the engine's thread waits behind in the rollouts
  if [ -n "$SPY_S" ] && command -v py-spy > /dev/null; then
    ( sleep 10  # the experiment's process started; the recording is given up when it ends first
      until [ "$(find "$RUN" -path "*grpo*" -name steps.jsonl -exec cat {} + 2>/dev/null | wc -l)" -ge 2 ]; do
        pgrep -f "pdbgym.cli experiment run" > /dev/null || exit 0; sleep 2; done
      py-spy record --gil --threads --subprocesses --nonblocking -r 100 -d "$SPY_S" -f raw -o "$OUT/${TAG}gil.txt" \
        --pid "$(pgrep -f "pdbgym.cli experiment run" | head -1)" > "$OUT/${TAG}spy.log" 2>&1
      python3 bench/gil_threads.py "$OUT/${TAG}gil.txt" --seconds "$SPY_S" > "$OUT/${TAG}gil-summary.txt" 2>&1 ) &
  fi
  python3 -m pdbgym.cli experiment run $TOML --out "$RUN" ${SEED:+--seeds $SEED} --device cuda --workers 12 --until "${UNTIL:-grpo}" \
    --minutes "${MINUTES:-8.5}" > "$OUT/${TAG}short.log" 2>&1; tail -5 "$OUT/${TAG}short.log"
  wait  # the py-spy recording, if one is running
  for f in $(find "$RUN" -path "*grpo*" -name steps.jsonl -o -name report.md -o -path "*trace*" -name "*.txt" \
      | head -6); do cp "$f" "$OUT/$TAG$(echo "${f#"$RUN"/}" | tr / _)"; done
fi
ls -la "$OUT"
