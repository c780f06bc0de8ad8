"""The README's own-documents path, run as written: its command block, top to bottom, on small
`<d>`-marked parallel documents, with a short training budget added to the training command."""

import os
import random
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from rfa_doc_mt.data.synthetic import generate_document, translate_document

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_block(heading: str) -> str:
    """The first ```bash block after ``heading`` in the README."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index(heading):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def commands(block: str):
    """The block's commands, continuation lines joined, each split as the shell would."""
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def write_documents(directory, name: str, documents: int, seed: int) -> None:
    """``name``.en / ``name``.de: invented parallel documents, a ``<d>`` line before each."""
    rng = random.Random(seed)
    source, target = [], []
    for _ in range(documents):
        sentences = generate_document(rng, 3, (4, 6))
        source += ["<d>"] + list(sentences)
        target += ["<d>"] + [t.target for t in translate_document(sentences, 3)]
    for suffix, lines in (("en", source), ("de", target)):
        (directory / f"{name}.{suffix}").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_the_own_documents_block_runs_as_written(tmp_path):
    block = readme_block("## Your own documents and translation")
    steps = commands(block)
    assert [step[0] for step in steps] == ["scripts/prepare_text.sh", "scripts/train.sh", "scripts/translate.sh",
                                           ".venv/bin/python"]
    assert steps[1][1].startswith("configs/text/")  # a config meant for real text, not a demo one
    # the project's folders where the block expects them (it runs from the project's root): a copy,
    # as fairseq's --user-dir refuses a package imported under another path than its own
    for name in ("scripts", "configs", "rfa_doc_mt"):
        shutil.copytree(os.path.join(ROOT, name), tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    venv = os.path.join(ROOT, ".venv")
    (tmp_path / ".venv").symlink_to(venv if os.path.isdir(venv) else sys.prefix)
    for name, documents, seed in (("train", 30, 1), ("valid", 2, 2), ("test", 2, 3)):
        write_documents(tmp_path, name, documents, seed)
    short = {"scripts/train.sh": ["--max-update", "2", "--cpu"], "scripts/prepare_text.sh": ["--workers", "1"],
             "scripts/translate.sh": ["--cpu"]}
    environment = dict(os.environ, OMP_NUM_THREADS="1")
    outputs = []
    for step in steps:
        done = subprocess.run([*step, *short.get(step[0], [])], cwd=tmp_path, env=environment,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{shlex.join(step)}:\n{done.stderr[-3000:]}"
        outputs.append(done)
    translated = (tmp_path / "test.translated.de").read_text(encoding="utf-8").splitlines()
    assert len(translated) == len((tmp_path / "test.de").read_text(encoding="utf-8").splitlines())
    assert translated.count("<d>") == 2  # the input's form: its document lines kept
    assert "s-BLEU" in outputs[-1].stdout + outputs[-1].stderr
