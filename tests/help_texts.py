"""The ``--help`` text of Python commands, all in one process (tests/test_docs.py runs this file).

``python tests/help_texts.py OUT.json`` reads a JSON list of requests on stdin and writes
``{key: help text, or None when the command printed none}`` to OUT.json (not to stdout, where
fairseq's logging writes). A request is one of

* ``["module", MODULE]``: ``python -m MODULE --help``;
* ``["module", MODULE, WORD]``: ``python -m MODULE WORD --help`` when WORD is one of MODULE's
  subcommands (then both texts come back, keyed ``MODULE`` and ``MODULE WORD``), else MODULE's;
* ``["fairseq", PROGRAM]`` (``fairseq-train``, ``fairseq-generate``, ...): the help of the parser
  fairseq builds for ``PROGRAM DATA --user-dir rfa_doc_mt --task doc_translation``, for
  fairseq-train once per model this plugin registers (``--arch``) and once with its optimizer,
  joined.

``python -m`` runs as its command would (``runpy``, with ``sys.argv`` set and stdout captured);
one process imports fairseq and torch once for all of them.
"""

import contextlib
import io
import json
import os
import re
import runpy
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(ROOT, "rfa_doc_mt")


def printed_help(run, argv):
    """What ``run()`` prints with ``sys.argv = argv`` (argparse's --help ends in SystemExit)."""
    out = io.StringIO()
    saved = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            run()
    except SystemExit:
        pass
    except Exception:  # noqa: BLE001  (a command that cannot print its help: say why)
        return "ERROR " + traceback.format_exc(limit=3)
    finally:
        sys.argv = saved
    return out.getvalue() or None


def module_help(module, *words):
    return printed_help(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True),
                        [module, *words, "--help"])


def subcommands(help_text):
    """The choices of a subparser, from the usage line of ``help_text`` (``{run,plot}``)."""
    usage = (help_text or "").split("\n\n")[0]
    found = re.search(r"\{([\w,-]+)\}", usage)
    return found.group(1).split(",") if found else []


def plugin_variants():
    """fairseq arguments that add each of this plugin's option groups to a parser."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    import rfa_doc_mt  # noqa: F401  (registers the plugin)

    base = ["--user-dir", USER_DIR, "--task", "doc_translation"]
    models = {}
    for arch, model in sorted(ARCH_MODEL_REGISTRY.items()):
        if model.__module__.startswith("rfa_doc_mt."):
            models.setdefault(model, arch)
    variants = [base + ["--arch", arch] for arch in models.values()]
    variants.append(base + ["--arch", "doc_transformer", "--optimizer", "finetune_adam",
                            "--lr-scheduler", "inverse_sqrt", "--criterion", "label_smoothed_cross_entropy"])
    return variants


FAIRSEQ_PARSERS = {"fairseq-train": "get_training_parser", "fairseq-generate": "get_generation_parser",
                   "fairseq-validate": "get_validation_parser", "fairseq-interactive": "get_interactive_parser"}


def fairseq_help(program):
    """The help of ``program``'s parser as fairseq completes it for a command line with the plugin's
    task and each of its models and its optimizer. (``PROGRAM --help`` itself exits before fairseq
    adds the task's, model's, optimizer's and criterion's options, so it lists none of them.)"""
    from fairseq import options

    if program not in FAIRSEQ_PARSERS:
        return None
    variants = plugin_variants() if program == "fairseq-train" else [["--user-dir", USER_DIR, "--task",
                                                                      "doc_translation"]]
    texts = []
    for variant in variants:
        parser = getattr(options, FAIRSEQ_PARSERS[program])()
        with contextlib.redirect_stderr(io.StringIO()):
            options.parse_args_and_arch(parser, input_args=["DATA", *variant], parse_known=True)
        texts.append(parser.format_help())
    return "\n".join(texts)


def answer(requests):
    helps = {}
    for kind, name, *word in requests:
        if kind == "fairseq":
            if name not in helps:
                helps[name] = fairseq_help(name)
            continue
        if name not in helps:
            helps[name] = module_help(name)
        if word and word[0] in subcommands(helps[name]):
            key = f"{name} {word[0]}"
            if key not in helps:
                helps[key] = module_help(name, word[0])
    return helps


if __name__ == "__main__":
    helps = answer(json.load(sys.stdin))
    with open(sys.argv[1], "w") as out:
        json.dump(helps, out)
