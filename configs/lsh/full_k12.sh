# Petrick et al. 2022, Table 2: full attention (baseline), k = 12 context sentences (L = 13).
CONTEXT=12
ATTENTION=full
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
