"""Output directories of ``python -m rfa_doc_mt.data.prepare``, written whole or not at all.

Every step writes into a hidden directory beside ``--out`` (:func:`staged_output`), which
replaces ``--out`` only when the block succeeds: a failed run leaves nothing behind. An earlier
``--out`` is replaced only when it holds nothing but what this script wrote there (or with
``--force``), so that a mistyped ``--out`` never deletes someone's files.
"""

import contextlib
import fnmatch
import os
import shutil
import tempfile
from typing import Iterator, List, Sequence

from .contrastive_sets import CONSISTENCY_MANIFEST, read_manifest
from .io import DataError, PrepareError
from .text import load_prep

# What a corpus directory written by this script holds (and, for the corpora that write their
# own contrastive sets, those folders): anything else there was put there by someone else.
CORPUS_OUTPUTS = ("prep.json", "preprocess.log", "dict.*.txt", "*.bin", "*.idx", "*.docs", "*.ref.*", "raw", "bpe",
                  "spm.model", "spm.vocab", "truecase.*.model")
CORPUS_SETS = {"synthetic": ("consistency", "valid_consistency"), "bible": ("consistency",)}


def earlier_outputs(out: str, marker: str) -> List[str]:
    """Entries of ``out`` (an earlier output of this script) that this script wrote there."""
    entries = os.listdir(out)
    if marker == CONSISTENCY_MANIFEST:
        sets = set(read_manifest(out).get("sets", {}))
        return [entry for entry in entries if entry == marker or entry in sets]
    patterns = CORPUS_OUTPUTS
    with contextlib.suppress(DataError):
        patterns += CORPUS_SETS.get(load_prep(out).get("corpus"), ())
    return [entry for entry in entries if any(fnmatch.fnmatchcase(entry, pattern) for pattern in patterns)]


def check_replaceable(out: str, marker: str, force: bool = False, keep: Sequence[str] = ()) -> None:
    """``out`` may be written if absent, empty, or an earlier output of this script holding
    nothing else than what this script wrote and ``keep`` (unless ``force``)."""
    if not os.path.exists(out):
        return
    if not os.path.isdir(out):
        raise DataError(f"{out}: exists and is not a directory")
    if not os.listdir(out):
        return
    if not os.path.isfile(os.path.join(out, marker)):
        raise DataError(
            f"{out}: exists, is not empty and holds no {marker}, so it was not written by this "
            f"script; remove it or choose another --out")
    if force:
        return
    lost = sorted(set(os.listdir(out)) - set(earlier_outputs(out, marker)) - set(keep))
    if lost:
        shown = ", ".join(entry + ("/" if os.path.isdir(os.path.join(out, entry)) else "") for entry in lost[:10])
        more = f" and {len(lost) - 10} more" if len(lost) > 10 else ""
        raise DataError(
            f"{out}: an earlier output of this script, which also holds what it did not write there: "
            f"{shown}{more}. Replacing {out} would delete them: move them elsewhere, or pass --force "
            f"to replace {out} with everything in it")


def _make_readable(directory: str) -> None:
    """Give staged files the modes the umask allows: mkdtemp/mkstemp create them private."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for root, directories, files in os.walk(directory):
        for name in directories:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


@contextlib.contextmanager
def staged_output(out: str, marker: str, force: bool = False, keep: Sequence[str] = ()) -> Iterator[str]:
    """Yield a temporary directory that replaces ``out`` when the block succeeds.

    ``keep``: entries of an earlier ``out`` copied into the temporary directory first (the
    block may overwrite them). Anything else an earlier ``out`` holds besides what this script
    wrote there stops the run before any work, unless ``force``."""
    out = os.path.abspath(out)
    check_replaceable(out, marker, force, keep)
    parent, name = os.path.split(out)
    os.makedirs(parent, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
    try:
        for entry in keep:
            source = os.path.join(out, entry)
            if os.path.isdir(source):
                shutil.copytree(source, os.path.join(stage, entry), symlinks=True)
            elif os.path.lexists(source):
                shutil.copy2(source, os.path.join(stage, entry), follow_symlinks=False)
        yield stage
        if not os.path.isfile(os.path.join(stage, marker)):
            raise PrepareError(f"internal error: {marker} was not written")
        check_replaceable(out, marker, force, keep)
        _make_readable(stage)
        if os.path.isdir(out) and not os.listdir(out):
            os.rmdir(out)
        if os.path.exists(out):
            previous = tempfile.mkdtemp(prefix=f".{name}.previous-", dir=parent)
            os.rmdir(previous)
            os.rename(out, previous)
            try:
                os.rename(stage, out)
            except BaseException:
                os.rename(previous, out)  # put the earlier output back
                raise
            shutil.rmtree(previous)
        else:
            os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
