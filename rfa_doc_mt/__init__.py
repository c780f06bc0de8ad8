"""rfa-doc-mt: document-level machine translation with efficient attention, as a fairseq
plugin. ``fairseq-train --user-dir rfa_doc_mt`` imports this package, which registers the
``doc_translation`` task, the models and the ``finetune_adam`` optimizer."""

from . import compat  # noqa: F401  (first: adapts fairseq to this torch before anything loads)
from . import tasks, models, optim  # noqa: F401

__version__ = "0.1.0"
