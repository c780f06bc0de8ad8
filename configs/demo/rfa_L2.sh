# RFA (Wu et al. 2022: random feature attention in decoder causal + cross attention) over
# 2-sentence windows (L = 2), tiny, for the embedded corpus (reproduce_rfa_*.sh).
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 1"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate none"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
