# RFA-sgate-avg (Wu et al. 2022, §3.2's comparison: the gate takes a weighted average of the earlier
# sentences and the current one) over 4-sentence windows, tiny, for the embedded corpus.
# b_f = 0 as in configs/rfa/common.sh.
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/train_args.sh"
TASK_ARGS="--context-size 3"
MODEL_ARGS="--arch rfa_doc_transformer_tiny --share-all-embeddings --rfa-gate sgate-avg --rfa-gate-bias-init 0"
TRAIN_ARGS="$DEMO_TRAIN_ARGS"
