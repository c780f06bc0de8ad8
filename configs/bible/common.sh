# Wu et al. 2022's Table 1 systems on the Bible (scripts/prepare_bible.sh: en-es, a chapter a
# document, a verse a sentence), at a size two CPU cores train to convergence: sourced by the
# configs in this folder after they set
#   FAMILY  transformer, rfa (RFA), rfa_sgate (RFA-sgate), rfa_cross_local (RFA with 2 of its 4
#           cross-attention heads softmax over the current sentence's source, beyond the paper) or
#           rfa_local (that, and 2 of its 4 causal heads softmax over the current target sentence)
#   WINDOW  L, sentences per window
# BPE size (8k), depth and peak learning rate (3e-3): chosen on validation s-BLEU
# (docs/reproduction.md, "The Bible: the search"). Everything else
# as Wu et al. 2022 (A.2) and fairseq's IWSLT recipe: RFA in decoder causal and cross attention,
# the gate in causal attention (bias 2, the paper's IWSLT choice); Adam (0.9, 0.98), inverse-sqrt
# schedule, dropout 0.3, weight decay 1e-4, label smoothing 0.1.
# Not the paper's: 3+3 layers of width 128 (the paper: 6+6 of 512), 4096 tokens an update (the
# paper: 16,384), 1000 warm-up updates (the paper: 8000 of its larger updates), random projections
# of RFA 128 (cross) + 32 (causal) at head dimension 32 (the paper: 256 + 32 at 64). Training
# stops on validation s-BLEU (reproduce's --converge adds the interval, patience and cap).
: "${FAMILY:?set FAMILY (transformer, rfa, rfa_sgate, rfa_cross_local or rfa_local) before sourcing configs/bible/common.sh}"
: "${WINDOW:?set WINDOW (L) before sourcing configs/bible/common.sh}"
SIZE="--share-all-embeddings --encoder-layers 3 --decoder-layers 3 --encoder-embed-dim 128 --decoder-embed-dim 128
  --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 --encoder-attention-heads 4 --decoder-attention-heads 4"
RFA="--arch rfa_doc_transformer $SIZE --rfa-cross-proj-dim 128 --rfa-causal-proj-dim 32"
case "$FAMILY" in
  transformer)     MODEL_ARGS="--arch doc_transformer $SIZE" ;;
  rfa)             MODEL_ARGS="$RFA --rfa-gate none" ;;
  rfa_sgate)       MODEL_ARGS="$RFA --rfa-gate sgate --rfa-gate-bias-init 2" ;;
  rfa_cross_local) MODEL_ARGS="$RFA --rfa-gate none --rfa-cross-local-heads 2" ;;
  rfa_local)       MODEL_ARGS="$RFA --rfa-gate none --rfa-cross-local-heads 2 --rfa-causal-local-heads 2" ;;
  *) echo "configs/bible/common.sh: FAMILY must be transformer, rfa, rfa_sgate, rfa_cross_local or rfa_local, got '$FAMILY'" >&2
     return 2 ;;
esac
TASK_ARGS="--context-size $((WINDOW - 1))"
# (the JSON holds no space: TRAIN_ARGS is split on spaces)
TRAIN_ARGS="--optimizer adam --adam-betas (0.9,0.98) --lr 3e-3 --lr-scheduler inverse_sqrt --warmup-updates 1000
  --warmup-init-lr 1e-07 --weight-decay 0.0001 --dropout 0.3 --max-tokens 4096
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --seed 1 --num-workers 0
  --no-epoch-checkpoints --log-interval 50"
