"""The suite's time limit (tests/no_hangs.py): a test that hangs fails, named, with every thread's
traceback, and the rest of its file still runs, whether it hangs in Python or in native code."""

import os
import subprocess
import sys
import textwrap

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))

CONFTEST = f"""
import sys
sys.path.insert(0, {TESTS!r})
from no_hangs import NoHangs


def pytest_configure(config):
    config.pluginmanager.register(NoHangs(config), "no_hangs")
"""

# a hang in native code: SIGALRM blocked in the main thread, as it is for good while a C++ call
# holds that thread (pytest-timeout's handler never runs there)
HANGING_TESTS = """
import signal
import time


def test_hangs_in_python():
    time.sleep(600)


def test_hangs_in_native_code():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(600)


def test_after_the_hangs():
    assert True
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_hanging_test_fails_with_its_tracebacks_and_the_rest_runs(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_hanging.py").write_text(textwrap.dedent(HANGING_TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    environment = dict(os.environ, RFA_DOC_MT_TEST_BACKSTOP="3")
    environment.pop("RFA_DOC_MT_TESTS_STARTED", None)  # a run of its own
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
                           "--timeout", "2", "-rA", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=100, env=environment)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Failed: Timeout (>2.0s) from pytest-timeout" in output, output  # in Python: failed at the limit
    # in native code: the process ended 3 s after the limit, xdist names the test, which comes back
    # failed with the tracebacks of the hang instead of running again
    assert "crashed while running 'test_hanging.py::test_hangs_in_native_code'" in output, output
    assert "test_hangs_in_native_code ran past its time limit" in output, output
    assert 'test_hanging.py", line 12 in test_hangs_in_native_code' in output, output
    assert "PASSED test_hanging.py::test_after_the_hangs" in output, output
