# RFA (configs/demo/rfa_L4.sh) with 2 of its 4 cross-attention heads softmax over the source
# sentence aligned with the current target sentence (--rfa-cross-local-heads; the other 2 stay RFA
# over the whole source) over 4-sentence windows (L = 4), tiny: beyond the paper, the remedy the
# diagnosis of RFA's slow learning found (docs/models.md).
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate none --rfa-cross-local-heads 2"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
