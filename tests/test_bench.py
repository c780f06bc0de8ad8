"""The benchmarks' own logic (their runs are exercised in test_reproduce on the smoke corpus)."""

import json
import os

import pytest

from rfa_doc_mt.bench.decode_memory import next_batch


def probes(*pairs):
    return [{"batch_size": batch, "peak_mb": peak} for batch, peak in pairs]


def test_equal_memory_search_doubles_then_aims_at_the_budget():
    assert next_batch(probes((12, 1000)), 4096) == 24  # within: double
    assert next_batch(probes((12, 1000), (24, 2000), (48, 4000)), 4096) == 96
    # 48 within, 96 beyond; memory linear at 1000 + 62.5 MB per window: the budget at 49.5
    assert next_batch(probes((48, 4000), (96, 7000)), 4096) == 49
    # the guess stays strictly between the two bounds, and adjacent bounds end the search
    assert 48 < next_batch(probes((48, 100), (96, 100000)), 4096) < 96
    assert next_batch(probes((48, 4000), (49, 4100)), 4096) == 0
    # beyond the budget from the start: halve; nothing fits even one window: stop
    assert next_batch(probes((12, 5000)), 4096) == 6
    assert next_batch(probes((1, 5000)), 4096) == 0


def test_update_cost_reads_each_config_and_times_what_it_builds(tmp_path):
    from rfa_doc_mt.reproduce.cost import config_arguments, main, model_options
    from rfa_doc_mt.reproduce.papers import ROOT

    arguments = config_arguments("configs/demo/lsh_self_cross_k0.sh", ROOT)
    assert arguments["task"][:2] == ["--context-size", "0"]
    options = model_options(arguments["model"])
    assert "--arch" not in options and "lsh_doc_transformer_tiny" not in options
    assert options[options.index("--lsh-rounds") + 1] == "4"

    out = tmp_path / "cost.json"
    assert main(["--systems", "demo-transformer_L2,demo-memory_L1", "--budget", "40", "--tokens", "64",
                 "--steps", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    transformer, memory = result["systems"]
    assert transformer["system"] == "demo-transformer_L2" and transformer["sentences_per_window"] == 2
    assert transformer["updates"] == 40 and transformer["seconds_per_update"] > 0
    assert transformer["core_seconds"] == pytest.approx(40 * transformer["seconds_per_update"])
    assert memory["updates"] == 10 and "not_measured" in memory  # a quarter of the budget: the fine-tuning
    assert result["total_core_seconds"] == pytest.approx(transformer["core_seconds"])
    with pytest.raises(SystemExit, match="unknown system"):
        main(["--systems", "demo-nonexistent", "--steps", "1"])


def test_training_speed_measures_a_step_of_the_batch_it_asks_for(capsys):
    from rfa_doc_mt.bench.training_speed import main

    assert main(["measure", "--model", "rfa", "--window-size", "2", "--tokens", "64", "--steps", "2",
                 "--sentence-length", "8", "--vocabulary", "60"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["windows"] == 4 and figures["tokens"] == 64  # 4 windows of 2 sentences of 8 tokens
    assert len(figures["step_seconds"]) == 2
    assert figures["seconds_per_step"] == pytest.approx(sum(figures["step_seconds"]) / 2)  # the median of two
    assert figures["tokens_per_second"] == pytest.approx(64 / figures["seconds_per_step"])
    assert figures["model"] == "rfa"
    # RFA with another causal gate (--rfa-gates of run): named after it
    assert main(["measure", "--model", "rfa", "--gate", "feature", "--window-size", "2", "--tokens", "64",
                 "--steps", "1", "--sentence-length", "8", "--vocabulary", "60"]) == 0
    gated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert gated["model"] == "rfa-feature" and gated["tokens"] == 64 and len(gated["step_seconds"]) == 1
    # RFA with its training features in torch's operators on every device (where a GPU would fuse them)
    from rfa_doc_mt.modules.random_feature_attention import features

    devices = features.FUSED_FEATURE_DEVICES
    try:
        assert main(["measure", "--model", "rfa", "--rfa-features", "torch", "--window-size", "2", "--tokens", "64",
                     "--steps", "1", "--sentence-length", "8", "--vocabulary", "60"]) == 0
        assert not features.FUSED_FEATURE_DEVICES
    finally:
        features.FUSED_FEATURE_DEVICES = devices
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["model"] == "rfa-torch-features"


def test_operator_count_counts_computing_operators_in_rfas_gpu_forms(tmp_path, capsys):
    """The operator counter: one per operator that computes, none for a view; the count taken in
    RFA's GPU forms (the features of every head in one product, where the CPU's form takes one
    product per head), the forms restored after; and a run's JSON with RFA / transformer per L."""
    import torch

    from rfa_doc_mt.bench.operator_count import OperatorCounter, count_step, main
    from rfa_doc_mt.modules.random_feature_attention import features, layers

    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with OperatorCounter() as counter:
        (a @ b).sin().view(-1).permute(0)
    assert dict(counter.counts) == {"mm": 1, "sin": 1}
    x = torch.randn(2, 4, 3, 8)  # 4 heads
    matrix = features.orthogonal_random_matrices(torch.Generator().manual_seed(1), 1, 4, 16, 8)[0]
    counts = count_step(lambda: features.random_fourier_features(x, matrix))
    assert counts["bmm"] == 1 and counts["mm"] == 0  # every head at once
    assert features.PER_HEAD_FEATURES == {"cpu"} and layers.PER_HEAD_KEYS_READ == {"cpu"}
    with OperatorCounter() as counter:
        features.random_fourier_features(x, matrix)
    assert counter.counts["mm"] == 4  # the CPU's form, one head at a time
    # with the fused features: one launch forward, one backward (and the product for W/τ's gradient),
    # no sine; W/τ of a learned τ one launch each way, none of the torch form's clamp and division
    x.requires_grad_()
    tau = torch.ones(4, requires_grad=True)
    counts = count_step(lambda: features.random_fourier_features(x, matrix, tau).sum().backward(),
                        fused_features=True)
    assert counts["triton:fourier_features_kernel"] == counts["triton:fourier_features_backward_kernel"] == 1
    assert counts["sin"] == 0 and counts["bmm"] == 1
    assert counts["triton:inverse_tau_kernel"] == counts["triton:inverse_tau_backward_kernel"] == 1
    assert counts["clamp_min"] == 0 and counts["div"] == 0
    # and the floored readout: one launch each way, none of the torch form's clamp and division
    from rfa_doc_mt.modules.random_feature_attention import fused_features
    from rfa_doc_mt.modules.random_feature_attention.state import normalised

    readout = torch.rand(2, 4, 3, 9, requires_grad=True)
    counts = count_step(lambda: normalised(readout).sum().backward(), fused_features=True)
    assert counts["triton:normalise_kernel"] == counts["triton:normalise_backward_kernel"] == 1
    assert counts["clamp_min"] == 0 and counts["div"] == 0
    assert features.FUSED_FEATURE_DEVICES == {"cuda"}
    assert fused_features.fused_normalise_work.__name__ == "fused_normalise_work"  # restored
    assert fused_features.fused_inverse_tau_work.__name__ == "fused_inverse_tau_work"
    out = tmp_path / "ops.json"
    assert main(["--out", str(out), "--tiny", "--window-sizes", "2", "--tokens", "64", "--sentence-length", "8",
                 "--vocabulary", "60"]) == 0
    result = json.loads(out.read_text())
    runs = {run["model"]: run for run in result["runs"]}
    assert runs["rfa"]["tokens"] == runs["transformer"]["tokens"] == 64
    assert result["summary"][0]["rfa_over_transformer"] == pytest.approx(
        runs["rfa"]["operators"] / runs["transformer"]["operators"])
    assert "L= 2: RFA's operators / the transformer's" in capsys.readouterr().out


def test_ceiling_projects_like_an_attention_and_attends_to_nothing():
    """The decode benchmark's ceiling: at every step each decoder attention projects the token
    (q, k, v for self-attention, q for cross-attention) and returns an output projection; the
    source is projected to keys and values once per sentence, one copy per beam group, as any
    cross attention with these projections does."""
    import torch
    from conftest import build_model

    import rfa_doc_mt  # noqa: F401  (registers the models)
    from rfa_doc_mt.bench.decode_speed import Timer, forced_length_beam_search, remove_decoder_attention
    from rfa_doc_mt.models.build import dictionary_task, toy_dictionary

    dictionary, separator = toy_dictionary(20)
    options = ["--encoder-layers", "1", "--decoder-layers", "2", "--dropout", "0"]
    model = remove_decoder_attention(build_model("doc_transformer_tiny", dictionary_task(dictionary, separator),
                                                 *options))
    calls = {}

    def count(name):
        def hook(module, inputs, output):
            calls.setdefault(name, []).append(inputs[0].shape)
        return hook

    for index, layer in enumerate(model.decoder.layers):
        for role in ("self_attn", "encoder_attn"):
            for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                getattr(getattr(layer, role), projection).register_forward_hook(count(f"{index}.{role}.{projection}"))
    generator = torch.Generator().manual_seed(3)
    sentences, beam, length = 3, 4, 5
    src = torch.randint(4, 24, (sentences, 7), generator=generator)
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.full((sentences,), 7)},
              "target": torch.randint(4, 24, (sentences, length), generator=generator)}
    best = forced_length_beam_search(model, sample, beam, dictionary.pad(), dictionary.eos(), Timer("cpu"))
    assert best.shape == (sentences, length) and best[:, -1].eq(dictionary.eos()).all()
    for index in range(2):
        for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
            assert len(calls[f"{index}.self_attn.{projection}"]) == length  # every step
        assert len(calls[f"{index}.encoder_attn.q_proj"]) == len(calls[f"{index}.encoder_attn.out_proj"]) == length
        # the source once per sentence: [source, sentences, dim], not once per beam or per step
        for projection in ("k_proj", "v_proj"):
            assert [tuple(shape[:2]) for shape in calls[f"{index}.encoder_attn.{projection}"]] == [(7, sentences)]


def test_readout_bandwidth_times_one_readout_in_both_layouts_and_a_pass_over_its_memory(tmp_path, capsys):
    from conftest import fp32_tolerance

    from rfa_doc_mt.bench.readout_bandwidth import main

    out = tmp_path / "readout.json"
    assert main(["--sources", "3", "--heads", "2", "--features", "16", "--head-dim", "4", "--beams", "2",
                 "--layers", "2", "--repeats", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["shape"] == {"sources": 3, "heads": 2, "features": 16, "columns": 5, "beams": 2, "layers": 2}
    assert result["summary_mb_per_layer"] == pytest.approx(3 * 2 * 16 * 5 * 4 / 1e6)
    # the two layouts hold the same states: their readouts sum the same 16 products of standard
    # normals (each below 25 in size with overwhelming probability) in different orders
    assert result["max_difference_between_layouts"] <= fp32_tolerance(16, 25.0)
    ms = result["ms_per_layer"]
    assert set(ms) == {"readout_column_major", "readout_row_major", "plain_pass"} and min(ms.values()) > 0
    for name, rate in result["gb_per_second"].items():
        assert rate == pytest.approx(result["summary_mb_per_layer"] / ms[name])
    assert result["readout_over_plain_pass"] == pytest.approx(ms["readout_column_major"] / ms["plain_pass"])
    assert "readout / plain pass" in capsys.readouterr().out


def test_readout_bandwidth_times_the_fused_read_at_both_precisions(tmp_path, capsys, monkeypatch):
    """The fused read of the same summaries, its products in fp32 and in 3xTF32 (both fp32 in Triton's
    interpreter, where this runs): timed, and the two outputs compared."""
    pytest.importorskip("triton")
    import subprocess
    import sys

    out = tmp_path / "readout.json"
    # Triton's interpreter is chosen at Triton's first import: a cold process of its own (not a fork of
    # the warm-start server, which has imported Triton for compiled kernels)
    environment = {**os.environ, "TRITON_INTERPRET": "1", "RFA_DOC_MT_WARM_START": ""}
    done = subprocess.run([sys.executable, "-m", "rfa_doc_mt.bench.readout_bandwidth", "--fused", "--sources", "2",
                           "--heads", "2", "--features", "16", "--head-dim", "4", "--beams", "3", "--layers", "2",
                           "--repeats", "1", "--sweep", "--out", str(out)], capture_output=True, text=True,
                          env=environment, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert {"fused_ieee", "fused_tf32x3"} <= set(result["ms_per_layer"])
    apart = result["fused_tf32x3_difference"]
    assert apart["max_abs"] == 0.0 and apart["max_output"] > 0  # the interpreter takes both in fp32
    assert "fused fp32 products / 3xTF32" in done.stdout
    # the sweep: every launch setting timed and its output set against the default's (the values
    # themselves: test_rfa_fused's cross read under other launch settings)
    from rfa_doc_mt.bench.readout_bandwidth import SWEEP, sweep_name

    names = [sweep_name(launch) for launch in SWEEP]
    assert len(set(names)) == len(SWEEP) == 12 and set(result["sweep"]) == set(names)
    assert all(result["ms_per_layer"][name] > 0 for name in names)
    assert all(0 <= result["sweep"][name]["max_abs_from_default"] < apart["max_output"] for name in names)
    assert done.stdout.count("GB/s  ") == len(names) and "fastest first" in done.stdout


def test_the_fastest_swept_cross_read_setting_is_chosen_only_where_it_pays_and_agrees():
    """readout_bandwidth --best: the fastest swept setting whose output lies within 2D fp32
    roundings of the default's, if at least 5% faster than the default; else the default ("")."""
    from rfa_doc_mt.bench.readout_bandwidth import best_launch, sweep_name

    def result(times, apart):
        launches = [{"block": 32, "num_warps": 4, "num_stages": 2}, {"block": 128, "num_warps": 8, "num_stages": 3}]
        names = [sweep_name(launch) for launch in launches]
        return {"shape": {"features": 512}, "fused_tf32x3_difference": {"max_output": 2.0},
                "ms_per_layer": {"fused_tf32x3": 1.0, **dict(zip(names, times))},
                "sweep": {name: {"launch": launch, "max_abs_from_default": gap}
                          for name, launch, gap in zip(names, launches, apart)}}

    close, far = 1e-6, 1e-3  # within 512 x 2^-24 x 2 = 6.1e-5, and beyond it
    assert best_launch(result([0.9, 0.7], [close, close])) == "block=128,num_warps=8,num_stages=3"
    assert best_launch(result([0.9, 0.7], [close, far])) == "block=32,num_warps=4,num_stages=2"
    assert best_launch(result([0.97, 0.98], [close, close])) == ""  # within 5% of the default
    assert best_launch(result([0.9, 0.7], [far, far])) == ""
    no_sweep = result([0.9, 0.7], [close, close])
    del no_sweep["sweep"]
    assert best_launch(no_sweep) == ""


def test_decode_speed_refuses_cross_read_settings_the_kernel_does_not_take(tmp_path):
    from rfa_doc_mt.bench.decode_speed import main

    with pytest.raises(SystemExit, match="--cross-read-launch"):
        main(["run", "--data", str(tmp_path), "--out", str(tmp_path / "x.json"), "--cross-read-launch", "block=48"])


def test_decode_breakdown_times_each_decoder_part_and_restores_the_model():
    """The per-part timing of a decoding batch: every attention, its cache reordering (beam
    search reorders at every step), the feed-forward layers and the output projection are timed,
    the parts never add up to more than the forward time, and the model's modules are their own
    again afterwards."""
    import torch
    from conftest import build_model

    import rfa_doc_mt  # noqa: F401  (registers the models)
    from rfa_doc_mt.bench.decode_breakdown import timed_parts
    from rfa_doc_mt.bench.decode_speed import Timer, forced_length_beam_search
    from rfa_doc_mt.models.build import dictionary_task, toy_dictionary

    dictionary, separator = toy_dictionary(20)
    model = build_model("rfa_doc_transformer_tiny", dictionary_task(dictionary, separator),
                        "--encoder-layers", "1", "--decoder-layers", "2", "--dropout", "0").eval()
    generator = torch.Generator().manual_seed(4)
    sample = {"net_input": {"src_tokens": torch.randint(4, 24, (3, 6), generator=generator),
                            "src_lengths": torch.full((3,), 6)},
              "target": torch.randint(4, 24, (3, 5), generator=generator)}
    timer = Timer("cpu")
    with timed_parts(model) as seconds:
        forced_length_beam_search(model, sample, 4, dictionary.pad(), dictionary.eos(), timer)
    assert set(seconds) == {"self", "self.reorder", "cross", "cross.reorder", "feed-forward", "output projection"}
    assert min(seconds.values()) > 0 and sum(seconds.values()) < timer.forward_seconds
    layer = model.decoder.layers[0]
    for module in (layer.self_attn, layer.encoder_attn, layer.fc1, model.decoder.output_projection):
        assert "forward" not in vars(module)
    assert "reorder_incremental_state" not in vars(layer.encoder_attn)


def test_kernel_counter_counts_the_chosen_decoder_steps_and_stops_after_the_last():
    """The decode benchmark's kernel counts: steps 1 and 2 of a decoding are profiled (the decoder
    call and the cache reordering of each), on a CPU as top-level operators, and the decoding stops
    once step 2 is counted; the ceiling (no attention) launches fewer operators per step than RFA."""
    import torch
    from conftest import build_model

    import rfa_doc_mt  # noqa: F401  (registers the models)
    from rfa_doc_mt.bench.decode_speed import (
        KernelCounter,
        StepsCounted,
        Timer,
        forced_length_beam_search,
        remove_decoder_attention,
    )
    from rfa_doc_mt.models.build import dictionary_task, toy_dictionary

    dictionary, separator = toy_dictionary(20)
    options = ["--encoder-layers", "1", "--decoder-layers", "1", "--dropout", "0"]
    generator = torch.Generator().manual_seed(5)
    sample = {"net_input": {"src_tokens": torch.randint(4, 24, (2, 6), generator=generator),
                            "src_lengths": torch.full((2,), 6)},
              "target": torch.randint(4, 24, (2, 6), generator=generator)}
    per_step = {}
    for name, arch in (("rfa", "rfa_doc_transformer_tiny"), ("ceiling", "doc_transformer_tiny")):
        model = build_model(arch, dictionary_task(dictionary, separator), *options)
        if name == "ceiling":
            model = remove_decoder_attention(model)
        counter = KernelCounter("cpu", [0, 1, 2])
        timer = Timer("cpu")
        with pytest.raises(StepsCounted):
            forced_length_beam_search(model, sample, 2, dictionary.pad(), dictionary.eos(), timer, counter)
        summary = counter.summary()
        assert summary["steps"] == [1, 2] and summary["kernels_per_step"] is None  # no GPU
        # the first step, apart, also reads the source (the cross attention's caches)
        assert summary["first_step"]["operators"] > max(summary["operators"])
        assert summary["device_ms_per_step"] is None and summary["top_kernels"] == []
        assert 0 < timer.first_step_seconds < timer.forward_seconds  # steps 1 and 2 ran after the first
        assert min(summary["operators"]) > 0
        # the host's time in them: ATen operators only here (no Triton launches on the eager path)
        aten, triton = summary["host"]["aten"], summary["host"]["triton"]
        assert aten["calls_per_step"] == summary["operators_per_step"] and aten["host_ms_per_step"] > 0
        assert aten["host_us_per_call"] == pytest.approx(aten["host_ms_per_step"] * 1000 / aten["calls_per_step"])
        assert triton == {"calls_per_step": 0, "host_ms_per_step": 0, "host_us_per_call": None}
        per_step[name] = summary["operators_per_step"]
    assert per_step["ceiling"] < per_step["rfa"]


def test_device_time_adds_up_each_kernel_and_the_busy_time():
    """On a GPU the kernel profile says where a step's time goes: each kernel name's device time and
    launches, and the total, from the profiler's device events."""
    from types import SimpleNamespace

    from rfa_doc_mt.bench.common import device_time

    def event(name, start, end):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(elapsed_us=lambda: end - start))

    total, per_name = device_time([event("gemm", 0, 30), event("causal_step_kernel", 30, 35),
                                   event("gemm", 40, 60)])
    assert total == 55
    assert per_name == {"gemm": (50, 2), "causal_step_kernel": (5, 1)}
    assert device_time([]) == (0.0, {})


def test_device_events_leave_out_the_annotations_mirrored_on_the_device():
    """The fused path wraps each Triton launch in a ``triton::<kernel>`` annotation, which the
    profiler also puts on the device's timeline: counted, each fused kernel would count twice."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from rfa_doc_mt.bench.common import device_events

    def event(name, device, annotation=False):
        return SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation)

    kernel, fill = event("cross_read_kernel", DeviceType.CUDA), event("fill", DeviceType.CUDA)
    events = [kernel, event("triton::cross_read_kernel", DeviceType.CUDA, annotation=True),
              event("triton::cross_read_kernel", DeviceType.CPU), fill,
              event("triton::causal_step_kernel", DeviceType.CUDA)]  # an older torch: no annotation flag set
    assert device_events(events) == [kernel, fill]


def test_a_profiled_step_names_the_operators_that_take_its_time():
    """The training benchmark's --profile: one more step under the profiler, its costliest operators
    first (on a CPU, by self time), with their share of the step."""
    import torch

    from rfa_doc_mt.bench.common import profiled_step

    a = torch.randn(256, 256)
    profile = profiled_step(lambda: [a @ a for _ in range(20)] and torch.relu(a), False, 2)
    assert len(profile["top"]) == 2 and profile["top"][0]["op"] in ("aten::mm", "aten::matmul")
    assert profile["top"][0]["calls"] == 20 and 0 < profile["top"][1]["share"] <= profile["top"][0]["share"] <= 1


def test_step_table_gives_each_models_time_per_step_and_rfas_cost_per_window():
    """The time per decoder step (forced lengths: steps = the longest window; tokens / steps = the
    windows decoding on average) and RFA's time beyond the ceiling's per step and window."""
    from rfa_doc_mt.bench.decode_speed import CEILING, FUSED
    from rfa_doc_mt.bench.speed_table import step_table

    def run(model, seconds, first=None):
        return {"window_size": 4, "batch_size": 8, "batch": 0, "model": model, "tokens": 300, "steps": 50,
                "forward_seconds": seconds, "first_step_seconds": first}

    result = {"settings": {"dtype": "fp32", "split": "test", "batches_per_window_size": 1},
              "machine": {"gpu": "GPU"},
              "summary": [{"window_size": 4, "batch_size": 8,
                           "tokens_per_second": {"transformer": 1.0, FUSED: 1.0, CEILING: 1.0}}],
              "runs": [run("transformer", 0.5, 0.02), run(FUSED, 0.9, 0.1), run(CEILING, 0.1, 0.01)]}
    table = step_table(result)
    assert "| decoder steps | 50 |" in table and "| windows decoding per step (mean) | 6 |" in table
    assert "| rfa_fused ms per step | 18.0 |" in table and "| ceiling ms per step | 2.0 |" in table
    assert "| rfa_fused ms: the encoder and the first step | 100.0 |" in table
    # (0.9 - 0.1) s / 50 steps / 8 windows = 2000 µs
    assert "| RFA fused beyond the ceiling, µs per step per window of the batch | 2000 |" in table
    for r in result["runs"]:
        del r["steps"]
    with pytest.raises(SystemExit, match="--data"):
        step_table(result)


def test_training_table_adds_rfa_with_torch_features_where_it_was_measured():
    """The training table: the transformer and RFA, and RFA with its features in torch's operators
    (``--rfa-features auto,torch``) with its ratio, only where that model was measured."""
    from rfa_doc_mt.bench.speed_table import training_table

    def run(model, seconds):
        return {"model": model, "window_size": 4, "seconds_per_step": seconds, "tokens_per_second": 4096 / seconds,
                "peak_mb": 100.0}

    result = {"settings": {"window_sizes": [4], "tokens": 4096}, "machine": {"gpu": "GPU"},
              "runs": [run("transformer", 0.04), run("rfa", 0.05), run("rfa-torch-features", 0.06)],
              "summary": [{"window_size": 4, "rfa_over_transformer": 1.25, "rfa_over_transformer_memory": 1.0,
                           "torch_features_over_transformer": 1.5}]}
    table = training_table(result)
    assert "| rfa-torch-features s/step (tokens/s) | 0.060 (68267) |" in table
    assert "| RFA with its features in torch's operators / transformer, step time | 1.50 |" in table
    result["runs"].pop()
    assert "torch" not in training_table(result)


def test_fused_hypotheses_are_counted_where_they_differ_and_tabled():
    """The GPU benchmark decodes the same batches on RFA's eager and fused paths: the windows whose
    best hypotheses differ (a near tie flipped by rounding) are counted per L and tabled."""
    import torch

    from rfa_doc_mt.bench.decode_speed import FUSED, differing_hypotheses
    from rfa_doc_mt.bench.speed_table import decode_table

    eager = [torch.tensor([[5, 6, 2], [7, 2, 1]]), torch.tensor([[9, 9, 2]])]
    fused = [torch.tensor([[5, 6, 2], [7, 2, 1]]), torch.tensor([[9, 8, 2]])]
    assert differing_hypotheses(eager, eager) == {"windows": 3, "differing": 0}
    counted = differing_hypotheses(eager, fused)
    assert counted == {"windows": 3, "differing": 1}
    summary = {"window_size": 15, "batch_size": 3, "tokens_per_second": {"transformer": 10.0, "rfa": 9.0, FUSED: 30.0},
               "fused_speedup": 3.0, "fused_hypotheses": counted}
    table = decode_table({"summary": [summary], "settings": {"dtype": "fp32", "beam": 4},
                          "machine": {"device": "cuda", "gpu": "H100"}, "commit": {"commit": "abcdef0"}})
    assert "| fp32: fused hypotheses differing from eager (windows) | 1 / 3 |" in table
    assert "cross read launched" not in table
    tuned = decode_table({"summary": [summary], "settings": {"dtype": "fp32", "beam": 4,
                                                             "cross_read_launch": "block=128,num_warps=8"},
                          "machine": {"device": "cuda", "gpu": "H100"}, "commit": {"commit": "abcdef0"}})
    assert "the cross read launched with block=128,num_warps=8" in tuned.splitlines()[0]


def test_the_cross_read_table_lists_every_read_the_sweep_fastest_first_and_the_choice():
    from rfa_doc_mt.bench.readout_bandwidth import sweep_name
    from rfa_doc_mt.bench.speed_table import readout_table

    launches = [{"block": 32, "num_warps": 4, "num_stages": 2}, {"block": 128, "num_warps": 8, "num_stages": 3},
                {"block": 64, "num_warps": 8, "num_stages": 3}]
    names = [sweep_name(launch) for launch in launches]
    ms = {"plain_pass": 0.25, "fused_tf32x3": 1.0, names[0]: 0.9, names[1]: 0.6}
    result = {"shape": {"sources": 1024, "heads": 8, "features": 512, "columns": 65, "beams": 4, "layers": 6},
              "machine": {"gpu": "H200"}, "commit": {"commit": "abcdef0123"},
              "fused_tf32x3_difference": {"max_output": 2.0}, "ms_per_layer": ms,
              "gb_per_second": {name: 1000.0 / value for name, value in ms.items()},
              "sweep": {names[0]: {"launch": launches[0], "max_abs_from_default": 1e-6},
                        names[1]: {"launch": launches[1], "max_abs_from_default": 2e-6},
                        names[2]: {"launch": launches[2], "error": "OutOfResources: shared memory"}}}
    table = readout_table(result)
    lines = table.splitlines()
    assert "the decoding steps' launch setting: block=128,num_warps=8,num_stages=3" in lines[0]
    rows = [line.split(" | ")[0].strip("| ") for line in lines[4:]]
    assert rows == ["plain_pass", "fused_tf32x3", names[1], names[0], names[2]]  # the sweep fastest first
    assert "| 0.600 | 1667 | 2.0e-06 |" in table and "failed" in lines[-1] and "OutOfResources" in lines[-1]


def test_triton_compiles_are_counted_while_entered_and_the_hook_before_is_kept(monkeypatch):
    """The decode benchmark counts the Triton kernels compiled while a batch is timed, through
    Triton's post-compile hook: each call counts, the hook set before still runs, and it is back in
    place afterwards; with Triton not imported nothing is counted (None)."""
    import sys
    from types import SimpleNamespace

    from rfa_doc_mt.bench.common import TritonCompiles

    seen = []
    runtime = SimpleNamespace(jit_post_compile_hook=lambda *a, **k: seen.append(k.get("key")))
    before = runtime.jit_post_compile_hook
    monkeypatch.setitem(sys.modules, "triton", SimpleNamespace(knobs=SimpleNamespace(runtime=runtime)))
    with TritonCompiles() as compiles:
        assert compiles.count == 0 and runtime.jit_post_compile_hook is not before
        runtime.jit_post_compile_hook(key="a")
        runtime.jit_post_compile_hook(key="b")
    assert compiles.count == 2 and seen == ["a", "b"] and runtime.jit_post_compile_hook is before
    monkeypatch.delitem(sys.modules, "triton")
    with TritonCompiles() as compiles:
        pass
    assert compiles.count is None


def test_a_decode_run_cut_short_is_tabled_with_the_window_sizes_it_measured():
    """A run cut short keeps a JSON of the L measured so far, in the plan's order: its table's title
    names them and the plan, not the last L taken (which need not be the largest)."""
    from rfa_doc_mt.bench.decode_speed import partial_note
    from rfa_doc_mt.bench.speed_table import decode_table

    note = partial_note([1, 15, 4], [1, 15, 4, 10])
    assert note == "L = 1, 15, 4 of 1, 15, 4, 10"
    summary = {"window_size": 15, "batch_size": 3, "tokens_per_second": {"transformer": 10.0, "rfa": 9.0}}
    table = decode_table({"summary": [summary], "settings": {"dtype": "fp32", "beam": 4}, "partial": note,
                          "machine": {"device": "cuda", "gpu": "H200"}, "commit": {"commit": "abcdef0"}})
    assert "(partial: L = 1, 15, 4 of 1, 15, 4, 10)" in table.splitlines()[0]


def test_rfa_variants_are_named_and_tabled_beside_the_transformer():
    """--rfa-variant NAME="OPTIONS" builds RFA with more options (rfa-NAME), tabled as tokens/s and
    as a ratio to the transformer's."""
    from rfa_doc_mt.bench.decode_speed import parse_variants
    from rfa_doc_mt.bench.speed_table import decode_table

    assert parse_variants(['local=--rfa-gate sgate --rfa-cross-local-heads 4', "delta=--rfa-update delta"]) == {
        "rfa-local": ["--rfa-gate", "sgate", "--rfa-cross-local-heads", "4"], "rfa-delta": ["--rfa-update", "delta"]}
    for bad in (["local"], ["=--rfa-update delta"], ["a b=--x"], ["x=-a", "x=-b"]):
        with pytest.raises(SystemExit):
            parse_variants(bad)
    summary = {"window_size": 15, "batch_size": 3, "tokens_per_second": {"transformer": 10.0, "rfa": 9.0,
                                                                        "rfa-local": 20.0},
               "over_transformer": {"rfa-local": 2.0}}
    table = decode_table({"summary": [summary], "settings": {"dtype": "fp32", "beam": 4},
                          "machine": {"cpu": "CPU"}, "commit": {"commit": "abcdef0"}})
    assert "| fp32: rfa-local tokens/s | 20 |" in table and "| fp32: rfa-local / transformer | 2.00 |" in table


def test_the_remedy_decodes_on_the_fused_path_beside_the_ceiling():
    """The variants (scripts/bench_gpu.sh's remedy, 2 cross heads local) decode on the fused path
    where RFA's paths include it, and are tabled against the ceiling too, and per decoder step."""
    from rfa_doc_mt.bench.decode_speed import CEILING, FUSED, variant_path
    from rfa_doc_mt.bench.speed_table import decode_table, step_table

    assert variant_path(["eager", "fused"]) == variant_path(["fused"]) == "fused"
    assert variant_path(["eager"]) == "eager"
    speeds = {"transformer": 10.0, FUSED: 12.0, CEILING: 40.0, "rfa-crosslocal2": 11.0}
    summary = {"window_size": 4, "batch_size": 8, "tokens_per_second": speeds,
               "over_transformer": {"rfa-crosslocal2": 1.1}, "over_ceiling": {"rfa-crosslocal2": 0.275}}
    settings = {"dtype": "fp16", "beam": 4, "rfa_variant_decoding": "fused", "split": "test",
                "batches_per_window_size": 1}
    table = decode_table({"summary": [summary], "settings": settings, "machine": {"gpu": "GPU"},
                          "commit": {"commit": "abcdef0"}})
    assert "| fp16: rfa-crosslocal2 (fused) tokens/s | 11 |" in table
    assert "| fp16: rfa-crosslocal2 (fused) / transformer | 1.10 |" in table
    assert "| fp16: rfa-crosslocal2 (fused) / ceiling | 0.28 |" in table
    runs = [{"window_size": 4, "batch_size": 8, "batch": 0, "model": model, "tokens": 300, "steps": 50,
             "forward_seconds": seconds} for model, seconds in
            (("transformer", 0.5), (FUSED, 0.9), (CEILING, 0.1), ("rfa-crosslocal2", 1.1))]
    table = step_table({"settings": settings, "machine": {"gpu": "GPU"}, "summary": [summary], "runs": runs})
    assert "| rfa-crosslocal2 ms per step | 22.0 |" in table
    # (1.1 - 0.1) s / 50 steps / 8 windows = 2500 µs
    assert "| rfa-crosslocal2 beyond the ceiling, µs per step per window of the batch | 2500 |" in table
