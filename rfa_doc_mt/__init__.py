"""rfa-doc-mt: document-level machine translation with efficient attention, as a fairseq
plugin. ``fairseq-train --user-dir rfa_doc_mt`` imports this package, which registers the
``doc_translation`` task, the models and the ``finetune_adam`` optimizer.

Some command-line tools need no fairseq registration: ``python -m rfa_doc_mt.generation.collect``
and ``python -m rfa_doc_mt.scoring.bleu``, which every decode runs once, and
``python -m rfa_doc_mt.reproduce``, which runs the others. Started that way, the package skips
the registration (3-4 s of imports each time); every other use registers.

``rfa_doc_mt.Translator`` (:class:`rfa_doc_mt.generation.translate.Translator`: translation from
Python) is imported on first use, so that the light tools above never import it.
"""

import sys

__version__ = "0.1.0"

# modules whose `python -m` run needs no fairseq registration
LIGHT_TOOLS = ("rfa_doc_mt.generation.collect", "rfa_doc_mt.scoring.bleu", "rfa_doc_mt.reproduce",
               "rfa_doc_mt.training_state")


# modules whose `python -m` run keeps standard error for its own progress and warnings
QUIET_TOOLS = ("rfa_doc_mt.generation.translate",)


def _started_module():
    # While `python -m PACKAGE.MODULE` imports PACKAGE, sys.argv[0] is "-m" (Python's documented
    # behaviour); sys.orig_argv holds the command line as given.
    if sys.argv[:1] != ["-m"]:
        return None
    argv = getattr(sys, "orig_argv", [])
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None


def quiet_fairseq_for(module) -> None:
    if module in QUIET_TOOLS:
        import logging

        logging.getLogger("fairseq").setLevel(logging.WARNING)  # its INFO lines on import and set-up


_module = _started_module()
quiet_fairseq_for(_module)
if _module not in LIGHT_TOOLS:
    # isort: off
    from . import compat  # noqa: F401  (first: adapts fairseq to this torch before anything loads)
    from . import tasks, models, optim  # noqa: F401
    # isort: on


# public names of submodules, imported on first use (PEP 562): {name: module}
LAZY_ATTRIBUTES = {"Translator": "rfa_doc_mt.generation.translate"}


def __getattr__(name):
    if name in LAZY_ATTRIBUTES:
        import importlib

        return getattr(importlib.import_module(LAZY_ATTRIBUTES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(LAZY_ATTRIBUTES))
