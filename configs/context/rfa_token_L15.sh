# RFA with Peng et al.'s (2021 §3.3) gate at every token (RFA-token, b_g initialised to 0) over
# 15-sentence windows (L = 15), tiny, for the long-range synthetic corpus
# (scripts/reproduce_context_length.sh): configs/demo/rfa_token_L4.sh at another context size.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 14"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate token --rfa-gate-bias-init 0"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
