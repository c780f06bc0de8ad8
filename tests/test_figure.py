"""The learning-curve figure across experiments' reports (python -m rfa_doc_mt.reproduce.figure)."""

import json

import pytest

from rfa_doc_mt.data.io import DataError
from rfa_doc_mt.reproduce.figure import curves_figure, main, row_curves
from rfa_doc_mt.reproduce.tables import seed_band

SEEDED = {  # a table searched over seeds (Table 1): a row lists its seeds' runs
    "title": "L = 4",
    "rows": [{"row": "transformer_L4", "system": "Transformer",
              "seeds": [{"seed": 1, "run": "t"}, {"seed": 2, "run": "t-seed2"}]},
             {"row": "rfa_L4", "system": "RFA", "seeds": [{"seed": 1, "run": "r"}]}],
    "valid_bleu_curves": {"t": [[100, 10.0], [200, 50.0]], "t-seed2": [[100, 20.0], [200, 70.0], [300, 80.0]],
                          "r": [[100, 1.0], [200, 5.0]]},
}
ONE_RUN = {  # the diagnosis: a row is one run with its curve
    "title": "diagnosis",
    "rows": [{"row": "transformer", "system": "Transformer", "valid_bleu_curve": [[100, 30.0]]},
             {"row": "rfa", "system": "RFA", "valid_bleu_curve": []}],
}
PER_SEED_ROWS = {  # the context-length table: a report row per seed
    "title": "L = 15",
    "rows": [{"row": "transformer_L15", "run": "c-t", "system": "Transformer L=15", "seed": 1},
             {"row": "transformer_L15_seed2", "run": "c-t2", "system": "Transformer L=15", "seed": 2},
             {"row": "lsh_L15", "run": "c-l", "system": "LSH L=15", "seed": 1}],
    "valid_bleu_curves": {"c-t": [[200, 40.0]], "c-t2": [[200, 60.0], [400, 90.0]], "c-l": [[200, 5.0]]},
}


def test_a_seed_band_is_the_mean_lowest_and_highest_where_seeds_stopped_the_others_go_on():
    steps, mean, low, high = seed_band([[(100, 1.0), (200, 3.0)], [(100, 3.0), (200, 5.0), (300, 9.0)]])
    assert steps == [100, 200, 300]
    assert mean == [2.0, 4.0, 9.0] and low == [1.0, 3.0, 9.0] and high == [3.0, 5.0, 9.0]


def test_row_curves_reads_each_layout_of_report():
    assert row_curves(SEEDED, "transformer_L4") == ("Transformer", [[(100, 10.0), (200, 50.0)],
                                                                    [(100, 20.0), (200, 70.0), (300, 80.0)]])
    assert row_curves(ONE_RUN, "transformer") == ("Transformer", [[(100, 30.0)]])
    label, curves = row_curves(PER_SEED_ROWS, "transformer_L15")
    assert label == "Transformer" and curves == [[(200, 40.0)], [(200, 60.0), (400, 90.0)]]


def test_row_curves_names_the_rows_when_one_is_missing_or_has_no_curve():
    with pytest.raises(DataError, match="its rows: rfa_L4, transformer_L4"):
        row_curves(SEEDED, "rfa_L15")
    with pytest.raises(DataError, match="no validation s-BLEU curve"):
        row_curves(ONE_RUN, "rfa")


def test_a_row_keeps_its_style_in_every_panel_under_a_common_label():
    panels = [("a", SEEDED, ["transformer_L4", "rfa_L4"]), ("b", PER_SEED_ROWS, ["lsh_L15", "transformer_L15"])]
    figure = curves_figure(panels, labels={"transformer_L4": "Transformer", "transformer_L15": "Transformer"})
    left, right = figure.axes
    styles = {axis: {line.get_label(): (line.get_color(), line.get_linestyle()) for line in axis.get_lines()}
              for axis in (left, right)}
    assert styles[left]["Transformer (2 seeds)"] == styles[right]["Transformer (2 seeds)"]
    assert styles[left]["RFA (1 seed)"] != styles[left]["Transformer (2 seeds)"]
    assert styles[right]["LSH (1 seed)"] not in styles[left].values()  # a row new to the panel: a new style
    assert len(left.collections) == 1  # a band for the row of two seeds, none for one seed
    assert len(curves_figure(panels * 2).axes) == 4 and len(curves_figure(panels[:1] * 5).axes) == 5


def test_the_figure_command_writes_its_png(tmp_path, capsys):
    report = tmp_path / "table.json"
    report.write_text(json.dumps(SEEDED))
    out = tmp_path / "curves.png"
    assert main(["--panel", f"{report}:transformer_L4,rfa_L4", "--title", "L = 4", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(DataError, match="no report"):
        main(["--panel", f"{tmp_path / 'none.json'}:rfa", "--out", str(out)])
    with pytest.raises(SystemExit):
        main(["--panel", str(report), "--out", str(out)])
    assert "REPORT.json:ROW" in capsys.readouterr().err
