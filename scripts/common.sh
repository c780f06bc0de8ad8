# Sourced by the other scripts: paths, the venv's tools, logging, config files.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# the Python: RFA_DOC_MT_PYTHON where set (scripts/gpu_run.sh, a machine's own Python), else the
# project's .venv, else PYTHON or python3
if [ -n "${RFA_DOC_MT_PYTHON:-}" ]; then
  PYTHON=$RFA_DOC_MT_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then
  PYTHON="$ROOT/.venv/bin/python"
else
  PYTHON=${PYTHON:-python3}
fi
USER_DIR="$ROOT/rfa_doc_mt"
# configs find the parts they share here (configs/demo/train_args.sh), wherever they were copied
RFA_DOC_MT_ROOT=$ROOT
export PYTHONWARNINGS=${PYTHONWARNINGS:-ignore::DeprecationWarning}

# fairseq_command fairseq-train|fairseq-generate ARGS...: that fairseq command, with this plugin
# (the one in $ROOT, which --user-dir names) imported before fairseq (rfa_doc_mt/fairseq_command.py)
fairseq_command() {
  package_module rfa_doc_mt.fairseq_command "$@"
}

# package_module MODULE ARGS...: python -m MODULE with the package of this checkout first on the path
# (PYTHONPATH set for that command only)
package_module() {
  PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m "$@"
}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# default_jobs: how many systems to train at once by default: one per GPU where torch sees GPUs
# (each run takes a GPU of its own: CUDA_VISIBLE_DEVICES), else one per CPU core (one torch thread each)
default_jobs() {
  local gpus
  gpus=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  if [ "${gpus:-0}" -gt 0 ]; then echo "$gpus"; else nproc; fi
}

# help_requested "$@": with -h or --help first, print the calling script's opening comment (its
# usage) and exit.
help_requested() {
  case "${1:-}" in
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
  esac
}
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

# option_value NAME DEFAULT ARGS...: the value of the last "NAME VALUE" / "NAME=VALUE" in ARGS.
option_value() {
  local name=$1 value=$2; shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      "$name") [ $# -ge 2 ] && value=$2 ;;
      "$name"=*) value=${1#*=} ;;
    esac
    shift
  done
  echo "$value"
}

# has_option NAME ARGS...: whether the flag NAME is among ARGS.
has_option() {
  local name=$1; shift
  local arg
  for arg in "$@"; do [ "$arg" = "$name" ] && return 0; done
  return 1
}
