# Long-short term masking (Zhang et al. 2020) over 4-sentence windows (L = 4), tiny, for the long-range
# synthetic corpus (scripts/reproduce_context_length.sh): 2 of the 4 heads of every encoder and
# decoder self-attention see only the current sentence, as configs/demo/lstm_L4.sh.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch long_short_doc_transformer_tiny --share-all-embeddings --local-heads 2 --local-attention encoder,decoder"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
