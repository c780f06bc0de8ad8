# Concatenation transformer over 8-sentence windows (L = 8), tiny, for the long-range synthetic
# corpus (scripts/reproduce_context_length.sh): the demo's settings, another context size.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 7"
MODEL_ARGS="--arch doc_transformer_tiny --share-all-embeddings"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
