# LSH attention (Petrick et al. 2022, Table 2) in encoder and decoder self-attention (one hash round, as
# Petrick et al. 2022's self-only systems), with k = 0 context sentences (windows of 1), tiny, for the embedded
# corpus (reproduce_lsh_table2.sh). Hash classes = k + 1 rounded up to an even number (2), chunks of 8
# (see lsh_L4.sh).
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 0"
MODEL_ARGS="--arch lsh_doc_transformer_tiny --share-all-embeddings
  --lsh-attention encoder-self,decoder-self --lsh-chunk-size 8 --lsh-hash-classes 2 --lsh-rounds 1"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
