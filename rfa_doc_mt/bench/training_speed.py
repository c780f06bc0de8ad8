"""Training speed and memory of RFA against the transformer as the window grows (paper sizes).

    python -m rfa_doc_mt.bench.training_speed run --out training_speed.json [--window-sizes 1,4,15]
        [--rfa-gates none,sgate,token,feature]

For every window size L and both models (``doc_transformer``, ungated ``rfa_doc_transformer``,
randomly initialised; ``--rfa-gates`` measures RFA with the causal gates it lists instead,
``rfa-<gate>``; ``--rfa-features auto,torch`` each also with its training features, floored
readout and learned temperature in torch's operators where a GPU with Triton would fuse them,
``rfa-torch-features``), one
batch of random windows of L sentences of ``--sentence-length`` tokens, as many windows as make
``--tokens`` tokens (the same number of tokens at every L), and a training step on it: forward,
label-smoothed cross-entropy, backward (no optimiser update, which costs the same for both).
Each (model, L) runs in a fresh process, one after the other, never two at once:

* ``seconds_per_step``: the median of ``--steps`` timed steps after one warm-up step;
* ``tokens_per_second``: target tokens / ``seconds_per_step``;
* ``peak_mb``: the peak memory the steps add above the built model: on a CPU the resident memory
  (``ru_maxrss`` after the steps minus before the first one), with ``--device cuda`` the GPU memory
  allocated (``torch.cuda.max_memory_allocated`` minus what the model and batch held before): what
  the step's activations and gradients cost.

With ``--device cuda`` every step ends with a synchronisation, so that its time is the GPU's.
``--profile N`` profiles one more step (``profile`` in each measurement): on a GPU the device's busy
time, the kernels launched and the N kernels that take most of it; on a CPU the N costliest operators.
``--tiny`` uses the ``*_tiny`` architectures: a fast check of the code paths, not a measurement.
A measurement that fails (e.g. out of memory) is recorded with its error, and the others go on.

The JSON holds the machine, the commit, the settings and each measurement, with
``rfa_over_transformer`` (RFA's step time ÷ the transformer's) per L, and with more than one
gate, ``over_transformer`` and ``over_sgate`` (every RFA's step time ÷ the transformer's, ÷
RFA-sgate's where it was measured).
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
from typing import Dict

import torch

from ..modules.random_feature_attention.gates import GATE_VARIANTS
from ..provenance import commit_info, machine_info, record_load_at_end, write_json
from .common import profiled_step, random_window_step, timed_steps

MODELS = {"transformer": "doc_transformer", "rfa": "rfa_doc_transformer"}
FEATURE_FORMS = ("auto", "torch")


def rfa_name(gate: str, features: str = "auto") -> str:
    """The name of RFA with causal gate ``gate`` in the results: ``rfa`` (ungated), ``rfa-sgate``...;
    with its features in torch's operators where they would be fused, ``rfa-torch-features``..."""
    name = "rfa" if gate == "none" else f"rfa-{gate}"
    return name if features == "auto" else f"{name}-torch-features"


def measure(args) -> Dict:
    """One (model, L) in this process."""
    from ..models.build import build_model, dictionary_task, toy_dictionary

    torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    if args.rfa_features == "torch":  # the training features, readout and temperature in torch's operators
        from ..modules.random_feature_attention import features

        features.FUSED_FEATURE_DEVICES = frozenset()
    dictionary, separator = toy_dictionary(args.vocabulary - 5)  # with the 4 special symbols and <sep>
    options = [] if args.model == "transformer" else ["--rfa-gate", args.gate]
    arch = MODELS[args.model] + ("_tiny" if args.tiny else "")
    model = build_model(arch, dictionary_task(dictionary, separator), options, seed=args.seed,
                        share_all_embeddings=True, max_source_positions=2048, max_target_positions=2048)
    model = model.to(args.device).train()
    step, windows, batch_tokens = random_window_step(model, dictionary, separator, args.tokens, args.window_size,
                                                     args.sentence_length, args.seed, device=args.device)
    if cuda:
        synchronised = step

        def step():
            synchronised()
            torch.cuda.synchronize(args.device)

        torch.cuda.synchronize(args.device)
        torch.cuda.reset_peak_memory_stats(args.device)
        before = torch.cuda.memory_allocated(args.device)
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    seconds = timed_steps(step, args.steps)
    peak = torch.cuda.max_memory_allocated(args.device) if cuda else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    per_step = statistics.median(seconds)
    name = args.model if args.model == "transformer" else rfa_name(args.gate, args.rfa_features)
    profiled = {"profile": profiled_step(step, cuda, args.profile)} if args.profile else {}
    return {**profiled, "model": name, "arch": arch, "window_size": args.window_size, "windows": windows,
            "tokens": batch_tokens, "seconds_per_step": per_step, "step_seconds": seconds,
            "tokens_per_second": batch_tokens / per_step, "peak_mb": (peak - before) / 2 ** 20,
            "peak_memory": "GPU memory allocated" if cuda else "resident memory (ru_maxrss)"}


def run(args) -> Dict:
    result = {"machine": machine_info(args.device), "commit": commit_info(),
              "settings": {"window_sizes": args.window_sizes, "tokens": args.tokens, "steps": args.steps,
                           "sentence_length": args.sentence_length, "vocabulary": args.vocabulary,
                           "threads": args.threads, "models": MODELS, "rfa_gates": args.rfa_gates,
                           "rfa_features": args.rfa_features,
                           "device": args.device, "tiny": args.tiny,
                           "step": "forward + label-smoothed cross-entropy + backward, no optimiser update"},
              "runs": [], "summary": []}
    for window_size in args.window_sizes:
        figures = {}
        models = [("transformer", "none", "auto")] + [("rfa", gate, features) for gate in args.rfa_gates
                                                       for features in args.rfa_features]
        for model, gate, features in models:
            name = model if model == "transformer" else rfa_name(gate, features)
            command = [sys.executable, "-m", "rfa_doc_mt.bench.training_speed", "measure", "--model", model,
                       "--gate", gate, "--rfa-features", features, "--window-size", str(window_size),
                       "--tokens", str(args.tokens),
                       "--steps", str(args.steps), "--sentence-length", str(args.sentence_length),
                       "--vocabulary", str(args.vocabulary), "--threads", str(args.threads), "--seed", str(args.seed),
                       "--device", args.device, "--profile", str(args.profile)] + (["--tiny"] if args.tiny else [])
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                error = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
                result["runs"].append({"model": name, "window_size": window_size, "error": error[0]})
                print(f"L={window_size:2d} {name:18s} failed: {error[0]}", flush=True)
                continue
            figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
            result["runs"].append(figures[name])
            print(f"L={window_size:2d} {name:18s} {figures[name]['tokens']:6d} tokens "
                  f"{figures[name]['seconds_per_step']:7.2f} s/step {figures[name]['tokens_per_second']:8.1f} tokens/s "
                  f"peak +{figures[name]['peak_mb']:7.1f} MB", flush=True)
            profile = figures[name].get("profile")
            if profile:
                busy = f"device busy {profile['device_ms']:.1f} ms, {profile['kernels']} kernels" if "device_ms" in \
                    profile else f"{profile['cpu_ms']:.1f} ms of operators"
                top = "; ".join(f"{entry['share']:.0%} {(entry.get('kernel') or entry.get('op'))[:60]}"
                                for entry in profile["top"][:3])
                print(f"L={window_size:2d} {name:18s} profiled step: {busy}; most time: {top}", flush=True)
        summary = {"window_size": window_size}
        if "rfa" in figures and "transformer" in figures:
            ratio = figures["rfa"]["seconds_per_step"] / figures["transformer"]["seconds_per_step"]
            memory_ratio = figures["rfa"]["peak_mb"] / max(figures["transformer"]["peak_mb"], 1e-9)
            summary.update(rfa_over_transformer=ratio, rfa_over_transformer_memory=memory_ratio)
            print(f"L={window_size:2d}: RFA step time / transformer's {ratio:.2f}, peak memory {memory_ratio:.2f}",
                  flush=True)
        if "rfa-torch-features" in figures and "transformer" in figures:
            ratio = figures["rfa-torch-features"]["seconds_per_step"] / figures["transformer"]["seconds_per_step"]
            summary.update(torch_features_over_transformer=ratio)
            print(f"L={window_size:2d}: RFA with its features in torch's operators, step time / transformer's "
                  f"{ratio:.2f}", flush=True)
        if len(args.rfa_gates) > 1 or args.rfa_gates != ["none"]:
            for baseline, key in (("transformer", "over_transformer"), ("rfa-sgate", "over_sgate")):
                if baseline in figures:
                    summary[key] = {name: f["seconds_per_step"] / figures[baseline]["seconds_per_step"]
                                    for name, f in figures.items() if name.startswith("rfa")}
                    print(f"L={window_size:2d}: step time / {baseline}'s: "
                          + ", ".join(f"{name} {r:.2f}" for name, r in summary[key].items()), flush=True)
        result["summary"].append(summary)
    return record_load_at_end(result)


def _features(value: str):
    forms = [form.strip() for form in value.split(",") if form.strip()]
    if not forms or any(form not in FEATURE_FORMS for form in forms):
        raise argparse.ArgumentTypeError(f"{value!r}: expected forms from {FEATURE_FORMS}")
    return forms


def _gates(value: str):
    gates = [gate.strip() for gate in value.split(",") if gate.strip()]
    unknown = [gate for gate in gates if gate not in GATE_VARIANTS]
    if unknown or not gates:
        raise argparse.ArgumentTypeError(f"{value!r}: expected gates from {GATE_VARIANTS}")
    return gates


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "measure"):
        sub = commands.add_parser(name, help="all models and window sizes" if name == "run" else
                                  "one model and window size in this process (run calls it)")
        sub.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (default 4096)")
        sub.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up (default 3)")
        sub.add_argument("--sentence-length", type=int, default=25)
        sub.add_argument("--vocabulary", type=int, default=10000)
        sub.add_argument("--threads", type=int, default=1)
        sub.add_argument("--seed", type=int, default=1)
        sub.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
        sub.add_argument("--profile", type=int, default=0, metavar="N",
                         help="profile one more step (torch.profiler): on a GPU the device's busy time, the kernels "
                              "launched and the N that take most of it; on a CPU the N costliest operators")
        sub.add_argument("--tiny", action="store_true",
                         help="the *_tiny architectures: a fast check of the code paths, not a measurement")
        features_help = ("auto: RFA's training features, readout and temperature through their Triton kernels "
                         "where they run (CUDA, with Triton); torch: in torch's operators everywhere")
        if name == "run":
            sub.add_argument("--rfa-features", type=_features, default=["auto"],
                             help=f"comma-separated, each RFA measured with each: {features_help} (default auto)")
            sub.add_argument("--window-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 15])
            sub.add_argument("--rfa-gates", type=_gates, default=["none"],
                             help="causal gates of the RFA models measured beside the transformer, comma-"
                                  f"separated from {','.join(GATE_VARIANTS)} (default none: ungated RFA)")
            sub.add_argument("--out", required=True, help="JSON file to write")
        else:
            sub.add_argument("--model", choices=sorted(MODELS), required=True)
            sub.add_argument("--gate", choices=GATE_VARIANTS, default="none", help="RFA's causal gate")
            sub.add_argument("--rfa-features", choices=FEATURE_FORMS, default="auto", help=features_help)
            sub.add_argument("--window-size", type=int, required=True)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if args.command == "measure":
        print(json.dumps(measure(args)))
        return 0
    result = run(args)
    write_json(result, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
