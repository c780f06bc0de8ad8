"""No test can hang the suite.

pytest-timeout (pytest.ini's ``timeout``; ``--timeout N``, the PYTEST_TIMEOUT variable or
``@pytest.mark.timeout(N)`` change it) fails a test that runs past its limit: SIGALRM interrupts it,
every thread's stack is printed and the suite goes on. A signal handler runs only when the main
thread is back in Python, and a test can hang inside native code (a C++ thread joined for good, as
gloo's teardown once did), where it never is. The backstop is faulthandler's watchdog, a C thread
that needs no interpreter: BACKSTOP_SECONDS after the limit it writes every thread's traceback to
a file and ends the test process. Under ``make test`` pytest-xdist reports that test as crashed,
naming it, and starts a new process for the rest of its file, which it gives back whole: the
crashed test comes back first, and fails at once with the tracebacks instead of running again.
Run in one process (no ``-n``), such a test ends the run; its tracebacks are left in the folder
named by RFA_DOC_MT_TESTS_STARTED.
"""

import faulthandler
import hashlib
import os
import shutil
import tempfile

import pytest

# seconds past the limit (RFA_DOC_MT_TEST_BACKSTOP sets others: tests/test_no_hangs.py)
BACKSTOP_SECONDS = float(os.environ.get("RFA_DOC_MT_TEST_BACKSTOP", 60))
STARTED_TESTS = "RFA_DOC_MT_TESTS_STARTED"


class NoHangs:
    """The backstop, and a mark per test while it runs (in a folder of the whole run, which the
    processes pytest-xdist starts inherit), so that a test which ended its process is known."""

    def __init__(self, config):
        self.started, self.tracebacks = None, None
        if not hasattr(config, "workerinput") and STARTED_TESTS not in os.environ:  # the controlling process
            os.environ[STARTED_TESTS] = self.started = tempfile.mkdtemp(prefix="rfa-doc-mt-started-")

    def pytest_unconfigure(self, config):
        if self.started:
            shutil.rmtree(self.started, ignore_errors=True)
            del os.environ[STARTED_TESTS]

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        mark = os.path.join(os.environ[STARTED_TESTS], hashlib.sha1(item.nodeid.encode()).hexdigest())
        item._ended_a_process = os.path.exists(mark)
        item._tracebacks = mark + ".tracebacks"
        with open(mark, "w") as started:
            started.write(item.nodeid)
        yield
        os.unlink(mark)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        if item._ended_a_process:
            tracebacks = open(item._tracebacks).read() if os.path.exists(item._tracebacks) else ""
            why = ("ran past its time limit and was ended with its test process; every thread's traceback "
                   f"then:\n{tracebacks}" if tracebacks else "ended its test process (crashed)")
            pytest.fail(f"{item.nodeid} {why}\n(not run again)", pytrace=False)

    def pytest_timeout_set_timer(self, item, settings):
        if settings.timeout and settings.timeout > 0 and not item._ended_a_process:
            self.tracebacks = open(item._tracebacks, "w")
            faulthandler.dump_traceback_later(settings.timeout + BACKSTOP_SECONDS, exit=True, file=self.tracebacks)
        # None: pytest-timeout's own timer is set too

    def pytest_timeout_cancel_timer(self, item):
        faulthandler.cancel_dump_traceback_later()
        if self.tracebacks is not None:
            self.tracebacks.close()
            os.unlink(self.tracebacks.name)
            self.tracebacks = None
