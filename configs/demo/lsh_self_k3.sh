# LSH attention (Petrick et al. 2022, Table 2) in encoder and decoder self-attention (one hash round, as
# Petrick et al. 2022's self-only systems), with k = 3 context sentences (windows of 4), tiny, for the embedded
# corpus (reproduce_lsh_table2.sh). Hash classes = k + 1 rounded up to an even number (4), chunks of 8
# (see lsh_L4.sh).
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch lsh_doc_transformer_tiny --share-all-embeddings
  --lsh-attention encoder-self,decoder-self --lsh-chunk-size 8 --lsh-hash-classes 4 --lsh-rounds 1"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
