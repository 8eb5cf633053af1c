"""`write_report` on a run directory written to disk: plots from metrics.jsonl and the paired held-out change."""

import json

import pytest

from evaluation.report import eval_changes, write_report


def _write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_report_compares_each_evaluation_with_the_first_on_the_same_tasks(tmp_path):
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 0, "eval/success": 0.25},
                                              {"step": 1, "rollout/reward": 0.3},
                                              {"step": 10, "eval/success": 0.35}])
    # steps 0 and 10 evaluate the same 40 tasks twice each; step 10 solves tasks 10-13 too
    _write_jsonl(tmp_path / "eval" / "step_0.jsonl", [{"index": p, "won": p < 10} for p in range(40)] * 2)
    _write_jsonl(tmp_path / "eval" / "step_10.jsonl", [{"index": p, "won": p < 14} for p in range(40)] * 2)
    _write_jsonl(tmp_path / "eval" / "step_2.jsonl", [{"index": p, "won": p < 10} for p in range(40)])
    changes = eval_changes(tmp_path)
    assert [(first, step) for first, step, _ in changes] == [(0, 2), (0, 10)]  # numeric order, not "10" < "2"
    assert changes[1][2]["diff"] == pytest.approx(changes[1][2]["after"] - changes[1][2]["before"]) \
        == pytest.approx(0.1)
    page = write_report(tmp_path).read_text()
    assert "<h2>Held-out change</h2>" in page and "0.250 &rarr; 0.350" in page and "+0.100" in page
    assert "data:image/png;base64," in page and "mean reward" not in page  # records without a reward


def test_report_shows_reward_changes_when_rewards_are_scores(tmp_path):
    """WebShop-like records: partial scores move while success does not."""
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 0, "eval/success": 0.0}, {"step": 5, "eval/success": 0.0}])
    _write_jsonl(tmp_path / "eval" / "step_0.jsonl", [{"index": p, "won": False, "reward": 0.2} for p in range(30)])
    _write_jsonl(tmp_path / "eval" / "step_5.jsonl", [{"index": p, "won": False, "reward": 0.5} for p in range(30)])
    page = write_report(tmp_path).read_text()
    assert "mean reward" in page and "0.200 &rarr; 0.500" in page and "+0.300" in page
    assert "0.000 &rarr; 0.000" in page


def test_report_without_two_evaluations_has_no_change_table(tmp_path):
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "rollout/reward": 0.3}])
    _write_jsonl(tmp_path / "eval" / "step_1.jsonl", [{"index": 0, "won": True}])
    assert eval_changes(tmp_path) == [] and "Held-out change" not in write_report(tmp_path).read_text()
