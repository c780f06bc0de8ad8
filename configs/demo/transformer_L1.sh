# Sentence-level concatenation transformer (L = 1), tiny, for `make demo`.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 0"
MODEL_ARGS="--arch doc_transformer_tiny --share-all-embeddings"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
