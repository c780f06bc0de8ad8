# LSH attention (paper 003) in all three attentions over 4-sentence windows (L = 4), tiny, for
# `make demo`. Hash classes = L = 4 as in paper 003 §5.2; chunks of 8 and 2 hash rounds (the paper:
# 10 and 4) because the synthetic sentences are short (5.5 target tokens on average) and the CPU is small.
# LSH's sorting and chunking make an update about 2.5x slower than the transformer's on this CPU,
# so the demo gives it fewer updates (500, the other systems 600) to stay inside the time budget.
DEMO_MAX_UPDATE=${DEMO_LSH_MAX_UPDATE:-500}
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch lsh_doc_transformer_tiny --share-all-embeddings
  --lsh-attention encoder-self,decoder-self,cross --lsh-chunk-size 8 --lsh-hash-classes 4 --lsh-rounds 2"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
