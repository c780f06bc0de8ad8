"""Start-up time: what fairseq imports and this plugin never uses, deferred to its first use.

``import fairseq`` imports every task and criterion module it ships. Two of them import
libraries at module level that no translation run calls: the audio-classification task
(``from sklearn import metrics``) and the sentence-prediction criterion (``from sklearn.metrics
import f1_score, matthews_corrcoef``, ``from scipy.stats import pearsonr, spearmanr``).
scikit-learn and scipy.stats take about a third of fairseq's import time (1.5-2 s of CPU in
every process that imports fairseq: each training, decoding and scoring run).

:func:`deferred` imports fairseq with stand-ins for those modules: a stand-in's attributes
are proxies that import the real module and forward to it on first use (a call, an attribute
lookup), so fairseq's audio and sentence-prediction code still works, only later. When the
``with`` block ends the stand-ins leave ``sys.modules``: any later ``import sklearn`` or
``import scipy.stats`` gets the real module. A module already imported is never replaced.

A start-up gain for users' commands, measured: ``python -m rfa_doc_mt.scoring.consistency --help``
(which imports the package, hence fairseq through :mod:`rfa_doc_mt.compat`), 5 runs each way,
interleaved, one torch thread, on the 2-core machine of the README: 2.83 s of CPU (user + system,
median) with the stand-ins, 4.03 s without them (``deferred`` replaced by a null context), 1.2 s
less per command and per worker it spawns. (Wall time was not comparable: two trainings shared the
machine, load average 10.)
"""

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Iterator, Sequence

# the modules fairseq's task and criterion modules import at module level and this plugin never calls
FAIRSEQ_UNUSED = ("sklearn", "sklearn.metrics", "scipy.stats")


class _Proxy:
    """``module.name`` (a function, a class or a submodule), imported on first use."""

    def __init__(self, module: str, name: str):
        self._where = (module, name)

    def _real(self):
        module, name = self._where
        real = importlib.import_module(module)
        if not hasattr(real, name):  # a submodule not imported by its package
            importlib.import_module(f"{module}.{name}")
        return getattr(real, name)

    def __call__(self, *args, **kwargs):
        return self._real()(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._real(), name)

    def __repr__(self):
        return f"<deferred {'.'.join(self._where)}>"


class _StandIn(types.ModuleType):
    """A module whose every public attribute is a :class:`_Proxy` of the real one."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Proxy(self.__name__, name)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: Sequence[str]):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name in self.names else None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []  # a package: its deferred submodules can be imported from it
        return module

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def deferred(names: Sequence[str] = FAIRSEQ_UNUSED) -> Iterator[None]:
    """Imports within the block get stand-ins for ``names`` (those not imported yet)."""
    finder = _StandInFinder([name for name in names if name not in sys.modules])
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in finder.names:
            module = sys.modules.get(name)
            if not isinstance(module, _StandIn):
                continue
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent and getattr(sys.modules.get(parent), child, None) is module:
                delattr(sys.modules[parent], child)  # the real package imports it again when asked
