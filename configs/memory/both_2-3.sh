# Feng et al. 2022, Table 3: memory on Source+Target, layers 2-3.
ENCODER_MEMORY_LAYERS=2,3
DECODER_MEMORY_LAYERS=2,3
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
