# Concatenation transformer over 2-sentence windows (L = 2), tiny, for the embedded corpus
# (reproduce_rfa_figure3.sh; reproduce_lstm.sh uses L = 3 as Zhang et al. 2020's 3-to-3 system).
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 1"
MODEL_ARGS="--arch doc_transformer_tiny --share-all-embeddings"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
