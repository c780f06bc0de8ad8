"""Build a registered model outside ``fairseq-train`` (tests, benchmarks): an architecture name,
model options as on the command line, and a task that only needs to carry the dictionaries."""

import argparse
import types
from typing import Iterable

import torch


def build_model(arch: str, task, options: Iterable[str] = (), seed: int = 1, **attributes):
    """The model of the registered architecture ``arch`` with ``options`` (its command-line
    model options, e.g. ``["--rfa-gate", "sgate"]``), then ``attributes`` set on the arguments
    (e.g. ``max_source_positions``), then the architecture's defaults for the rest; parameters
    are drawn after ``torch.manual_seed(seed)``, and ``args.seed`` (it seeds RFA's random
    matrices) is ``seed`` too unless ``attributes`` say otherwise.
    Returns the model as built (train mode)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    import rfa_doc_mt  # noqa: F401  (registers the models)

    if arch not in ARCH_MODEL_REGISTRY:
        raise ValueError(f"unknown architecture {arch!r}")
    model_class = ARCH_MODEL_REGISTRY[arch]
    parser = argparse.ArgumentParser(argument_default=argparse.SUPPRESS)
    model_class.add_args(parser)
    args = parser.parse_args(list(options))
    args.arch, args.seed = arch, seed
    for name, value in attributes.items():
        setattr(args, name, value)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return model_class.build_model(args, task)


def dictionary_task(dictionary, separator: int):
    """What building a model asks of a task: one joint dictionary and its sentence separator."""
    return types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary,
                                 source_separator=separator, target_separator=separator)


def toy_dictionary(words: int):
    """A fairseq dictionary of ``words`` made-up words after the special symbols, and ``<sep>``
    last: returns (dictionary, separator index)."""
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for index in range(words):
        dictionary.add_symbol(f"w{index}")
    return dictionary, dictionary.add_symbol("<sep>")
