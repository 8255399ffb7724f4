"""``det preview-search``: the searcher section, then trials per training length (Determined's closed
form for stop-based ASHA, a labelled simulation otherwise)."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from det_airflow.cli.main import main

ASHA = """
entrypoint: python3 train.py
hyperparameters:
  lr: {type: log, minval: -4, maxval: -1, base: 10}
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 16
  max_length: {batches: 937}
"""


def _preview(tmp_path, capsys, text, *extra):
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    code = main(["preview-search", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _table(out):
    """The table's rows as (trials, training time)."""
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.split("|")[0].strip() == "Trials"))
    rows = []
    for line in lines[start + 2 :]:
        if "|" not in line:
            break
        count, text = (cell.strip() for cell in line.split("|"))
        rows.append((int(count), text))
    return rows


def test_prints_the_search_configuration_as_yaml(tmp_path, capsys):
    code, out, _ = _preview(tmp_path, capsys, ASHA)
    assert code == 0
    assert out.startswith("Using search configuration:\n")
    searcher = yaml.safe_load(out.split("\n", 1)[1].split("\n\n", 1)[0])
    assert searcher["name"] == "adaptive_asha" and searcher["max_length"] == {"batches": 937}
    assert searcher["mode"] == "standard" and searcher["max_trials"] == 16


def test_counts_trials_at_each_rung_length(tmp_path, capsys):
    _, out, _ = _preview(tmp_path, capsys, ASHA)
    assert "   Trials | Training Time" in out
    rows = _table(out)
    assert [text for _, text in rows] == [
        "train for 58 Batches",
        "train for 234 Batches",
        "train to completion",
    ]
    assert sum(count for count, _ in rows) == 16
    total = 58 * rows[0][0] + 234 * rows[1][0] + 937 * rows[2][0]
    assert out.rstrip().endswith(
        f"This search will create a total of 16 trial(s) and train for a total of {total} Batches."
    )


def test_stop_based_asha_is_determined_closed_form_and_says_so(tmp_path, capsys):
    _, out, _ = _preview(tmp_path, capsys, ASHA)
    assert "Closed form (as Determined 0.38)" in out and "Simulation" not in out
    # brackets (3 rungs, 12 trials) and (2, 4): 12 -> 3 -> 1 and 4 -> 1 continue past each rung
    assert _table(out) == [
        (9, "train for 58 Batches"),
        (5, "train for 234 Batches"),
        (2, "train to completion"),
    ]


def test_conservative_search_matches_determined_preview(tmp_path, capsys):
    config = """
    entrypoint: python3 train.py
    hyperparameters:
      lr: {type: log, minval: -4, maxval: -1, base: 10}
    searcher:
      name: adaptive_asha
      metric: loss
      mode: conservative
      max_trials: 10
      divisor: 3
      time_metric: batches
      max_time: 1000
    """
    _, out, _ = _preview(tmp_path, capsys, config)
    assert _table(out) == [
        (5, "train for 111 batches"),
        (2, "train for 333 batches"),
        (3, "train to completion"),
    ]
    total = 5 * 111 + 2 * 333 + 3 * 1000
    assert out.rstrip().endswith(
        f"This search will create a total of 10 trial(s) and train for a total of {total} batches."
    )


def test_promotion_asha_is_labelled_as_a_simulation(tmp_path, capsys):
    config = ASHA.replace("max_trials: 16", "max_trials: 16\n  stop_once: false")
    _, out, _ = _preview(tmp_path, capsys, config)
    assert "Simulation: " in out and "Closed form" not in out


def test_the_preview_is_the_same_every_time(tmp_path, capsys):
    assert _preview(tmp_path, capsys, ASHA)[1] == _preview(tmp_path, capsys, ASHA)[1]


def test_time_metric_lengths_show_the_metric_name(tmp_path, capsys):
    config = ASHA.replace("max_length: {batches: 937}", "time_metric: epochs\n  max_time: 16")
    config = config.replace("max_trials: 16", "max_trials: 32\n  divisor: 2")
    _, out, _ = _preview(tmp_path, capsys, config)
    texts = [text for _, text in _table(out)]
    assert texts[-1] == "train to completion" and all(t.endswith(" epochs") for t in texts[:-1])
    assert "train for a total of" in out and out.rstrip().endswith(" epochs.")


def test_promotion_based_asha_trains_cumulative_rungs(tmp_path, capsys):
    config = ASHA.replace("max_trials: 16", "max_trials: 16\n  stop_once: false")
    _, out, _ = _preview(tmp_path, capsys, config)
    texts = [text for _, text in _table(out)]
    assert texts[0] == "train for 58 Batches" and "train for 292 Batches" in texts


def test_random_search_trains_every_trial_to_completion(tmp_path, capsys):
    config = """
    entrypoint: python3 train.py
    searcher: {name: random, metric: loss, max_trials: 5, max_length: {epochs: 3}}
    """
    _, out, _ = _preview(tmp_path, capsys, config)
    assert _table(out) == [(5, "train to completion")]
    assert "create a total of 5 trial(s) and train for a total of 15 Epochs." in out


def test_single_search_without_a_length(tmp_path, capsys):
    _, out, _ = _preview(tmp_path, capsys, "entrypoint: x\nsearcher: {name: single, metric: loss}\n")
    assert _table(out) == [(1, "train to completion")]
    assert out.rstrip().endswith("This search will create a total of 1 trial(s).")


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (ASHA.replace("max_trials: 16", "max_trials: ten"), "searcher.max_trials"),
        (ASHA.replace("  max_length: {batches: 937}\n", ""), "searcher"),
    ],
)
def test_a_bad_config_is_one_error_naming_the_field(tmp_path, capsys, text, path):
    code, out, err = _preview(tmp_path, capsys, text)
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and f"{path}: " in err
    assert len(err.strip().splitlines()) == 1


def test_a_missing_file_is_an_error(tmp_path, capsys):
    code = main(["preview-search", str(tmp_path / "nope.yaml")])
    assert code == 1 and "no such file" in capsys.readouterr().err
