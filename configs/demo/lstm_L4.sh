# Long-short term masking transformer (Zhang et al. 2020) over 4-sentence windows (L = 4), tiny, for
# `make demo`: half of the encoder and decoder self-attention heads see only their sentence.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch long_short_doc_transformer_tiny --share-all-embeddings --local-heads 2 --local-attention encoder,decoder"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
