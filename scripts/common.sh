# Sourced by the other scripts: paths, the venv's tools, logging, config files.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -x "$ROOT/.venv/bin/python" ]; then
  PYTHON="$ROOT/.venv/bin/python"; FAIRSEQ_BIN="$ROOT/.venv/bin/"
else
  PYTHON=${PYTHON:-python3}; FAIRSEQ_BIN=""
fi
USER_DIR="$ROOT/rfa_doc_mt"
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore::DeprecationWarning}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { echo "error: $*" >&2; exit 2; }

# A config file sets TASK_ARGS, MODEL_ARGS, TRAIN_ARGS (and optionally DECODE_ARGS).
load_config() {
  local config=$1
  [ -f "$config" ] || die "$config: config file not found"
  TASK_ARGS=""; MODEL_ARGS=""; TRAIN_ARGS=""; DECODE_ARGS=""
  # shellcheck disable=SC1090
  source "$config"
  [ -n "$MODEL_ARGS" ] || die "$config: MODEL_ARGS is empty"
}

# Languages of a prepared data directory: "SRC TGT" from its dictionaries.
data_languages() {
  local data=$1
  [ -d "$data" ] || die "$data: data directory not found"
  "$PYTHON" - "$data" <<'PY'
import json, os, sys
d = sys.argv[1]
p = os.path.join(d, "prep.json")
if os.path.isfile(p):
    prep = json.load(open(p))
    print(prep["source_lang"], prep["target_lang"])
else:
    langs = sorted(f[5:-4] for f in os.listdir(d) if f.startswith("dict.") and f.endswith(".txt"))
    sys.exit(f"error: {d}: no prep.json; pass the languages") if len(langs) != 2 else print(*langs)
PY
}
