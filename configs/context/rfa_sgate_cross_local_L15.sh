# RFA-sgate (configs/context/rfa_sgate_L15.sh) with 2 of its 4 cross-attention heads softmax over
# the source sentence aligned with the target sentence each query predicts (--rfa-cross-local-heads;
# the other 2 stay RFA over the whole source) over 15-sentence windows (L = 15), tiny, for the
# long-range synthetic corpus: beyond the paper, the remedy the diagnosis of RFA's slow learning
# found (docs/models.md); configs/demo/rfa_cross_local_L4.sh's heads with RFA-sgate's gate.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 14"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate sgate --rfa-gate-bias-init 2 --rfa-cross-local-heads 2"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
