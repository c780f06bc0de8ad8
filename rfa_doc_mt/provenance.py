"""What every recorded result carries beside its figures: the machine, the commit, and JSON and
PNG files written through a temporary name. The benchmarks (:mod:`rfa_doc_mt.bench`) and the
reproductions (:mod:`rfa_doc_mt.reproduce`) both write their results with these.
"""

import json
import os
import platform
import subprocess
from typing import Dict

from .data.io import atomic_write


def machine_info(device: str) -> Dict:
    import torch  # here: `python -m rfa_doc_mt.reproduce` starts without torch

    info = {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": device}
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = names[0] if names else platform.processor()
    except OSError:
        info["cpu"] = platform.processor()
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(device)
    try:
        # other work on the machine inflates times (not memory): keep the load beside the figures
        info["load_average_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def record_load_at_end(result: Dict) -> Dict:
    """Add the load average at the end of a run to ``result["machine"]``; returns ``result``."""
    try:
        result["machine"]["load_average_at_end"] = os.getloadavg()
    except OSError:
        pass
    return result


def commit_info() -> Dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*git_args):
        try:
            return subprocess.run(["git", "-C", root, *git_args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def write_json(result: Dict, path: str) -> None:
    with atomic_write(path) as handle:
        json.dump(result, handle, indent=1)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed), its logger kept at WARNING:
    fairseq's import leaves the root logger at DEBUG, and matplotlib would log every font it reads."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure, out: str) -> None:
    """Write a matplotlib figure as PNG through a temporary name."""
    temporary = out + ".tmp.png"
    figure.savefig(temporary, dpi=150)
    os.replace(temporary, out)
    print(f"wrote {out}")
