"""``python -m rfa_doc_mt.reproduce``."""

import sys

from ..data.io import DataError
from .cli import main

try:
    sys.exit(main())
except DataError as error:
    sys.exit(f"error: {error}")
