"""rfa_doc_mt.fairseq_command's allocator setting: fairseq-train keeps the memory it frees."""

import json
import os
import platform
import subprocess
import sys
import types

import pytest

from rfa_doc_mt import fairseq_command

GLIBC = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"

# A child process (mallopt is process-wide): the minor page faults of allocating and freeing a
# 120 MB tensor three times, before and after keep_freed_memory; then what a process it starts sees.
CHILD = """
import json, os, resource, subprocess, sys, torch
from rfa_doc_mt.fairseq_command import keep_freed_memory
def faults():
    start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        block = torch.ones(30_000_000)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start
before = faults()
chosen = keep_freed_memory()
faults()  # the first block after the change comes from the heap's growth
after = faults()
seen = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('MALLOC_MMAP_MAX_'))"],
                      capture_output=True, text=True).stdout.strip()
print(json.dumps({"before": before, "after": after, "chosen": chosen, "child_sees": seen}))
"""


def run_child(**environment):
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120,
                          env={**env, **environment})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    result = run_child()
    # each 120 MB block faults in at least once a page (or a huge page) before; after, the heap
    # holds the freed block and the next one reuses its pages
    assert result["before"] >= 3 and result["after"] * 10 < result["before"], result
    assert result["chosen"] == ["MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"]
    assert result["child_sees"] == "0"  # spawned workers start with the same setting


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_a_setting_of_the_users_own_is_left_as_it_is():
    result = run_child(MALLOC_MMAP_MAX_="65536")
    assert result["chosen"] == ["MALLOC_TRIM_THRESHOLD_"] and result["child_sees"] == "65536"


def test_only_fairseq_train_changes_the_allocator(monkeypatch):
    calls = []
    monkeypatch.setattr(fairseq_command, "keep_freed_memory", lambda: calls.append("kept"))
    monkeypatch.setattr(fairseq_command, "write_resources", lambda *args: None)
    monkeypatch.setattr(fairseq_command.importlib, "import_module",
                        lambda name: types.SimpleNamespace(cli_main=lambda: calls.append(name)))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert fairseq_command.main(["fairseq-generate", "data"]) == 0
    assert calls == ["fairseq_cli.generate"]
    assert fairseq_command.main(["fairseq-train", "data", "--save-dir", "nowhere"]) == 0
    assert calls == ["fairseq_cli.generate", "kept", "fairseq_cli.train"]
