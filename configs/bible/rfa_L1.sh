# RFA (Wu et al. 2022) on the Bible en-es (configs/bible/common.sh), L = 1.
FAMILY=rfa
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
