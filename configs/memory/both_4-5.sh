# Feng et al. 2022, Table 3: memory on Source+Target, layers 4-5.
ENCODER_MEMORY_LAYERS=4,5
DECODER_MEMORY_LAYERS=4,5
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
