"""The benchmarks' own logic (their runs are exercised in test_reproduce on the smoke corpus)."""

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
