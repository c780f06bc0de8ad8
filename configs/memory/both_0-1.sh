# Feng et al. 2022, Table 3: memory on Source+Target, layers 0-1.
ENCODER_MEMORY_LAYERS=0,1
DECODER_MEMORY_LAYERS=0,1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
