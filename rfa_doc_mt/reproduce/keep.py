"""Keeping finished runs where the loss of OUT cannot take them (``--keep DIR``).

A reproduction's runs live in OUT/runs; a long one spans machines and sittings, and a machine
can be handed back with OUT on it. ``--keep DIR`` writes each finished run's files, its
checkpoints left out, to DIR/RUN.tar.xz (a few hundred kB: logs, translations, scores, the
decoding timed alone), and restores into OUT every kept run that OUT lacks, so that the same
command on a fresh machine trains only what is left and tabulates everything. DIR can be
committed or copied anywhere.

An archive is never replaced by a copy of the run older than it: each run folder records (in
``.kept``, itself never archived) the archive it was last restored from or kept to, and a folder
whose record is not the archive now in DIR (one restored before the run was kept again from
elsewhere, or one with no record) does not overwrite it: it says so, and deleting the archive
lets it be kept.

A kept run carries a fingerprint of the corpus it was scored on (its prep.json and test
references): restoring it beside another corpus is refused. A first stage that another run is
fine-tuned from is kept once that run is kept (its checkpoint is what the fine-tuning needs
until then), and the table's decoding speed comes from ``decoded-alone/`` (running.decode_alone),
which a kept run holds when it was timed before it was kept.
"""

import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from typing import Dict, List, Optional

from ..data.io import DataError, atomic_write, sha256

SUFFIX = ".tar.xz"
MANIFEST = "kept.json"  # inside each archive: what it holds and the corpus it was scored on
RECORD = ".kept"  # in a run folder: the sha256 of the archive it was last restored from or kept to


def _left_out(name: str) -> bool:
    """Checkpoints (the run's bulk, tens of MB) and editors' or atomic writes' temporary files."""
    return name.endswith((".pt", ".tmp")) or name.startswith(".")


def run_files(run_dir: str) -> List[str]:
    """The files of a run to keep, relative to it, sorted."""
    kept = []
    for folder, subfolders, names in os.walk(run_dir):
        subfolders[:] = sorted(s for s in subfolders if not s.startswith("."))
        for name in names:
            if not _left_out(name):
                kept.append(os.path.relpath(os.path.join(folder, name), run_dir))
    return sorted(kept)


def corpus_fingerprint(data: str) -> Dict[str, str]:
    """What identifies the corpus a run was scored on, wherever it lies: the sha256 of its
    prep.json without the command that wrote it (which names the folder), of its test references
    and of its contrastive sets."""
    fingerprint = {}
    prep = os.path.join(data, "prep.json")
    if os.path.isfile(prep):
        with open(prep, encoding="utf-8") as handle:
            settings = {key: value for key, value in json.load(handle).items() if key != "command"}
        fingerprint["prep.json"] = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    names = sorted(name for name in os.listdir(data) if name.startswith("test.ref."))
    sets = os.path.join(data, "consistency")
    if os.path.isdir(sets):
        names += sorted(os.path.join("consistency", name) for name in os.listdir(sets) if name.endswith(".json"))
    fingerprint.update({name: sha256(os.path.join(data, name)) for name in names})
    return fingerprint


def _archive_bytes(run_dir: str, key: str, corpus: Dict[str, str]) -> bytes:
    """The run's archive, byte for byte the same for the same files (sorted, no times or owners)."""
    files = run_files(run_dir)
    manifest = {"run": key, "corpus": corpus, "files": {name: sha256(os.path.join(run_dir, name)) for name in files}}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
        entries = [(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())]
        for name in files:
            with open(os.path.join(run_dir, name), "rb") as handle:
                entries.append((name, handle.read()))
        for name, content in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def keep_run(run_dir: str, keep_dir: str, key: str, data: str, log=print) -> bool:
    """Write RUN's archive to ``keep_dir`` (replacing an older one whose files differ, unless the
    archive there is not the one this folder was restored from or last kept to); whether anything
    was written."""
    if not os.path.isfile(os.path.join(run_dir, "train.done")):
        raise DataError(f"{key}: not finished training ({run_dir}); only finished runs are kept")
    content = _archive_bytes(run_dir, key, corpus_fingerprint(data))
    path = os.path.join(keep_dir, key + SUFFIX)
    record = os.path.join(run_dir, RECORD)
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            kept = handle.read()
        if kept == content:
            _record(record, kept)
            return False
        synced = open(record).read().strip() if os.path.isfile(record) else None
        if synced is None:
            log(f"{key}: not kept: {run_dir} has no record of the archive it was restored from or kept to (a "
                f"folder kept or restored before such records), so {path} may be newer than this copy; compare "
                "them, and delete the archive to keep this copy instead")
            return False
        if synced != hashlib.sha256(kept).hexdigest():
            log(f"{key}: not kept: {path} is not the archive {run_dir} was restored from or kept to (it was "
                "kept since from another copy of the run); delete it to keep this copy instead")
            return False
    with atomic_write(path, "wb") as handle:
        handle.write(content)
    _record(record, content)
    return True


def _record(record: str, archive: bytes) -> None:
    with atomic_write(record) as handle:
        handle.write(hashlib.sha256(archive).hexdigest() + "\n")


def _manifest(archive: tarfile.TarFile, path: str) -> dict:
    member = archive.extractfile(MANIFEST) if MANIFEST in archive.getnames() else None
    if member is None:
        raise DataError(f"{path}: not a kept run (no {MANIFEST} inside)")
    return json.load(member)


def restore_runs(keep_dir: str, runs: str, data: str, log=print) -> List[str]:
    """Restore into ``runs`` every run kept in ``keep_dir`` that ``runs`` has not finished; the
    runs restored. A kept run of another corpus than ``data`` is refused (DataError), before
    anything is restored. An unfinished run in its place (a training interrupted on this
    machine) is moved aside to RUN.replaced-TIME, not deleted."""
    if not os.path.isdir(keep_dir):
        return []
    corpus = corpus_fingerprint(data)
    todo = []
    for name in sorted(os.listdir(keep_dir)):
        if not name.endswith(SUFFIX):
            continue
        path = os.path.join(keep_dir, name)
        with tarfile.open(path, "r:xz") as archive:
            manifest = _manifest(archive, path)
        if manifest["corpus"] != corpus:
            raise DataError(f"{path}: kept from another corpus than {data} (its prep.json or test references "
                            "differ): restore it beside the corpus it was scored on, or keep into another folder")
        key = manifest["run"]
        if not os.path.isfile(os.path.join(runs, key, "train.done")):
            todo.append((key, path, manifest))
    restored = []
    for key, path, manifest in todo:
        run_dir = os.path.join(runs, key)
        if os.path.exists(run_dir):
            aside = f"{run_dir}.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
            os.replace(run_dir, aside)
            log(f"{key}: an unfinished run was here; moved to {aside} (the kept one is finished)")
        partial = run_dir + ".restoring"
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(path, "r:xz") as archive:
            for name in manifest["files"]:
                target = os.path.join(partial, name)
                if os.path.relpath(target, partial).startswith(".."):
                    raise DataError(f"{path}: {name} lies outside the run")
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as handle:
                    handle.write(archive.extractfile(name).read())
                if sha256(target) != manifest["files"][name]:
                    raise DataError(f"{path}: {name} does not match its checksum")
        with open(path, "rb") as handle:
            _record(os.path.join(partial, RECORD), handle.read())
        os.replace(partial, run_dir)  # whole or not at all
        restored.append(key)
    return restored


def kept_runs(keep_dir: Optional[str]) -> List[str]:
    """The runs ``keep_dir`` holds (their archives' names)."""
    if not keep_dir or not os.path.isdir(keep_dir):
        return []
    return sorted(name[:-len(SUFFIX)] for name in os.listdir(keep_dir) if name.endswith(SUFFIX))
