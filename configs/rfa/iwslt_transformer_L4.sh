# Wu et al. 2022, Table 1: the transformer baseline on IWSLT15 zh-en, L = 4.
CORPUS=iwslt
GATE=softmax
WINDOW=4
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
