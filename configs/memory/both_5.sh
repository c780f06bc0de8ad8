# Feng et al. 2022, Table 3: memory on Source+Target, layer 5 (the top): the paper's best and the default placement.
ENCODER_MEMORY_LAYERS=5
DECODER_MEMORY_LAYERS=5
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
