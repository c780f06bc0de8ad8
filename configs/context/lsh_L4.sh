# LSH attention (Petrick et al. 2022) in encoder self, decoder causal and cross attention over
# 4-sentence windows (L = 4), tiny, for the long-range synthetic corpus
# (scripts/reproduce_context_length.sh): four hash rounds, hash classes = L rounded up to an
# even number (4, Petrick et al. 2022, §5.2), chunks of 8 as configs/demo/lsh_L4.sh.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch lsh_doc_transformer_tiny --share-all-embeddings
  --lsh-attention encoder-self,decoder-self,cross --lsh-chunk-size 8 --lsh-hash-classes 4 --lsh-rounds 4"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
