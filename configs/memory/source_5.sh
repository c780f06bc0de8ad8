# Feng et al. 2022, Table 3: memory on Source only, layer 5.
ENCODER_MEMORY_LAYERS=5
DECODER_MEMORY_LAYERS=none
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
