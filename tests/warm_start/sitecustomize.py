"""The test suite's warm-start hook (warm_start_server.py says what it does and why).

Python imports this module at the start-up of every interpreter whose ``PYTHONPATH`` holds this
directory, which only the test session puts there (tests/conftest.py), for the commands it
starts. When ``RFA_DOC_MT_WARM_START`` names a server's socket and the interpreter was started as
``python -m rfa_doc_mt.MODULE ARGS``, it hands the command to the server and exits with the
status of the server's run; when no server takes it, the command goes on here, cold.
"""

import os
import sys


def started_module():
    """(module, arguments) of ``python [options] -m module arguments``, else None.

    Python sets ``sys.argv[0]`` to ``"-m"`` until it has found the module; ``sys.orig_argv`` is
    the command line as given. Forms this does not recognise run cold."""
    if sys.argv[:1] != ["-m"]:
        return None
    arguments = sys.argv[1:]
    for index, option in enumerate(sys.orig_argv[1:], start=1):
        if option == "-m" and sys.orig_argv[index + 2:] == arguments and index + 1 < len(sys.orig_argv):
            return sys.orig_argv[index + 1], arguments
        if option.startswith("-m") and len(option) > 2 and sys.orig_argv[index + 1:] == arguments:
            return option[2:], arguments
    return None


def module_search_path():
    """``sys.path`` as ``python -m`` sets it after start-up: the working directory first, unless
    ``-P``/``PYTHONSAFEPATH`` (or ``-I``) leaves it out."""
    return sys.path[:] if sys.flags.safe_path or sys.flags.isolated else [os.getcwd()] + sys.path


def hand_off() -> None:
    started = started_module()
    if not started or not started[0].startswith("rfa_doc_mt."):
        return
    from warm_start_server import delegate

    status = delegate(started[0], started[1], module_search_path())
    if status is not None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(status & 0xFF)


if os.environ.get("RFA_DOC_MT_WARM_START"):
    hand_off()
