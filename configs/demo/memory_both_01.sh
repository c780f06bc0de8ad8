# Recurrent-memory transformer (Feng et al. 2022, Table 3 ablation), tiny, for the embedded corpus:
# memory in both layers on both sides. Otherwise as memory_L1.sh (memory in the top layer, index 1, of both sides).
MEMORY_ENCODER_LAYERS=0,1
MEMORY_DECODER_LAYERS=0,1
source "${RFA_DOC_MT_ROOT:-$(dirname "${BASH_SOURCE[0]}")/../..}/configs/demo/memory_L1.sh"
