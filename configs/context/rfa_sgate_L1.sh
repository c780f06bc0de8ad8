# RFA with the sentential gate (Wu et al. 2022, §3.2, RFA-sgate, b_f initialised to 2) over
# 1-sentence windows (L = 1), tiny, for the long-range synthetic corpus
# (scripts/reproduce_context_length.sh): configs/demo/rfa_sgate_L4.sh at another context size.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 0"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate sgate --rfa-gate-bias-init 2"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
