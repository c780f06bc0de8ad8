# Petrick et al. 2022 (Petrick et al. 2022, "Locality-Sensitive Hashing for Long Context NMT") §5.2, Table 2:
# document-level systems over windows of k context sentences + the current one (L = k + 1).
# Sourced by the configs in this folder after they set
#   CONTEXT   k, the number of context sentences (paper: 0, 3, 9, 12)
#   ATTENTION full | self | self-cross  (LSH nowhere / in encoder+decoder self-attention / in all three)
# Paper settings: 'base' transformer (here the doc_transformer sizes), LSH chunks of 10, hash classes
# = number of concatenated sentences k + 1 rounded up to even (the model's default, from
# --context-size: rfa_doc_mt/modules/lsh_attention/hashing.py), 1 hash round for LSH self-attention
# and 4 for all three, Adam with learning rate 1e-3, batches of 3133 subwords, dropout 0.3.
# Not stated by the paper (this project's choices): label smoothing 0.1, inverse-sqrt warmup.
: "${CONTEXT:?set CONTEXT (k) before sourcing configs/lsh/common.sh}"
: "${ATTENTION:?set ATTENTION (full, self or self-cross) before sourcing configs/lsh/common.sh}"

TASK_ARGS="--context-size $CONTEXT"
case "$ATTENTION" in
  full)       MODEL_ARGS="--arch doc_transformer --share-all-embeddings" ;;
  self)       MODEL_ARGS="--arch lsh_doc_transformer --share-all-embeddings
                --lsh-attention encoder-self,decoder-self --lsh-chunk-size 10 --lsh-rounds 1" ;;
  self-cross) MODEL_ARGS="--arch lsh_doc_transformer --share-all-embeddings
                --lsh-attention encoder-self,decoder-self,cross --lsh-chunk-size 10 --lsh-rounds 4" ;;
  *) echo "configs/lsh/common.sh: ATTENTION must be full, self or self-cross, got '$ATTENTION'" >&2; return 2 ;;
esac
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --lr 1e-3 --lr-scheduler inverse_sqrt
  --warmup-updates 4000 --max-tokens 3133 --max-update ${LSH_MAX_UPDATE:-100000}
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --seed 1
  --no-epoch-checkpoints --log-interval 100"
