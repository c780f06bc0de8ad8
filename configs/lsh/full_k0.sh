# Petrick et al. 2022, Table 2: full attention (baseline), k = 0 context sentences (L = 1).
CONTEXT=0
ATTENTION=full
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
