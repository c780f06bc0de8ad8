# The concatenation transformer on the Bible en-es (configs/bible/common.sh), L = 1.
FAMILY=transformer
WINDOW=1
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
