# LSH attention (Petrick et al. 2022) in all three attentions over 4-sentence windows (L = 4), tiny, for
# `make demo`: hash classes = L = 4 and four hash rounds as Petrick et al. 2022, §5.2's three-fold systems;
# chunks of 8 (the paper: 10) because the synthetic sentences are short (5.5 target tokens on average).
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch lsh_doc_transformer_tiny --share-all-embeddings
  --lsh-attention encoder-self,decoder-self,cross --lsh-chunk-size 8 --lsh-hash-classes 4 --lsh-rounds 4"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
