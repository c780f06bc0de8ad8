# RFA with GLA's decay per feature (Yang et al. 2024; RFA-feature, rank 16, τ = 16, b initialised
# to 0) over 15-sentence windows (L = 15), tiny, for the long-range synthetic corpus
# (scripts/reproduce_context_length.sh): configs/demo/rfa_feature_L4.sh at another context size.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 14"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate feature --rfa-gate-rank 16 --rfa-gate-temperature 16 --rfa-gate-bias-init 0"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
