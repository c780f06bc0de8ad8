# Feng et al. 2022, Table 3: memory on Target only, layer 5 (the paper's Memory Side study, §5.1).
ENCODER_MEMORY_LAYERS=none
DECODER_MEMORY_LAYERS=5
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
