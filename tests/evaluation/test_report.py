"""`write_report` on a run directory written to disk: plots from metrics.jsonl and the paired held-out change."""

import json
import re

import pytest
from report_runs import full_run, old_run

from app.cli import main
from evaluation.reports.run_figures import last_multi_sample_eval, pass_curve, scatter_files
from evaluation.reports.run_report import eval_changes, write_report


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


# ---------------------------------------------------------------------------------------------- diagnostic figures

FIGURE_TITLES = ("Figure 1:", "Figure 2:", "Training dynamics", "Figure 8:", "Figure 10:", "Figure 5:")


def _images(page: str) -> list[str]:
    return re.findall(r"<h2>([^<]*)</h2><img alt=", page)


def test_full_run_draws_every_figure(tmp_path):
    page = write_report(full_run(tmp_path / "a")).read_text()
    drawn = _images(page)
    for title in FIGURE_TITLES:
        assert any(t.startswith(title) for t in drawn), (title, drawn)
    assert "left out" not in page


def test_old_run_leaves_figures_out_with_a_reason(tmp_path):
    page = write_report(old_run(tmp_path / "old")).read_text()
    drawn = _images(page)
    assert any(t == "Training dynamics" for t in drawn)  # reward, actor/grad_norm and rollout_corr/kl exist
    for title in ("Figure 1:", "Figure 2:", "Figure 8:", "Figure 10:", "Figure 5:"):
        assert not any(t.startswith(title) for t in drawn)
        assert re.search(rf"<p class='missing'>{title}[^<]* left out: [^<]+</p>", page), title
    assert "not logged: entropy, policy-update KL" in page


def test_pass_at_k_uses_the_unbiased_estimator_on_the_last_multi_sample_eval(tmp_path):
    run = full_run(tmp_path / "a", steps=6)
    step, groups = last_multi_sample_eval(run)
    ks, ys = pass_curve(groups)
    # c per task = 4, 3, 2, 1, 1, 0 x 5 of n = 4. pass@1 = 11/40; pass@2 = 1 - C(4-c, 2)/C(4, 2) per task
    # = 1, 1, 5/6, 1/2, 1/2, 0 x 5, mean (3 + 5/6)/10; pass@4 = 5/10 (the tasks with any win)
    assert step == 6 and ks == [1, 2, 4]
    assert ys == pytest.approx([11 / 40, (3 + 5 / 6) / 10, 0.5])
    assert last_multi_sample_eval(old_run(tmp_path / "old")) is None


def test_several_runs_share_the_axes_and_the_report_goes_to_the_first_or_out(tmp_path):
    a, b = full_run(tmp_path / "a"), full_run(tmp_path / "b", spread=0.05, seed=1)
    page = write_report([a, b]).read_text()
    assert (a / "report.html").exists() and not (b / "report.html").exists()
    assert "Summary" not in page and "Held-out change: a" in page and "Held-out change: b" in page
    single = write_report(a, out=tmp_path / "single.html").read_text()
    assert len(_images(page)) == len(_images(single))  # overlaid, not one figure per run
    assert page != single
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "cmp" / "r.html")]) == 0
    assert len(_images((tmp_path / "cmp" / "r.html").read_text())) == len(_images(page))


def test_scatter_figure_reads_the_saved_samples(tmp_path):
    run = full_run(tmp_path / "a", steps=4)
    assert [s for s, _ in scatter_files(run)] == [1, 4]
    page = write_report(run).read_text()
    assert "Figure 10: trainer vs rollout token probability" in page


def test_many_overlaid_runs_get_distinct_colours_and_one_legend_beside_the_panels(monkeypatch):
    from evaluation.reports import run_figures as report_figures

    records = [{"step": s, "rollout/reward": 0.1 * s, "diag/entropy": 1.0 / s, "diag/policy_kl_k1": 0.01 * s,
                "diag/policy_kl_k3": 0.02 * s} for s in (1, 2, 3)]
    runs = [report_figures.RunData(f"arm{i}", None, records) for i in range(12)]
    assert len({report_figures.run_color(i, 12) for i in range(12)}) == 12  # the default cycle repeats after 10
    drawn = []
    monkeypatch.setattr(report_figures, "png", lambda fig: drawn.append(fig) or "image")
    assert report_figures.dynamics(runs).image == "image"
    fig = drawn[0]
    assert all(ax.get_legend() is None for ax in fig.axes)  # no panel legend covering the curves
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [f"arm{i}" for i in range(12)]
    assert any("solid" in ax.get_title() and "dashed" in ax.get_title() for ax in fig.axes)
    report_figures.plt.close(fig)


def test_gigpo_runs_get_their_anchor_state_plots_and_others_do_not(tmp_path):
    from report_runs import write_jsonl

    gigpo = tmp_path / "gigpo"
    write_jsonl(gigpo / "metrics.jsonl", [{"step": s, "rollout/reward": 0.1 * s, "gigpo/anchor_states": 200.0 + s,
                                           "gigpo/anchor_group_size_mean": 5.5, "gigpo/anchor_step_frac": 0.9,
                                           "gigpo/step_adv_abs_mean": 0.3} for s in (1, 2, 3)])
    assert {"GiGPO anchor states (step groups of ≥ 2)", "GiGPO: share of steps in an anchor group, and |A^S|"} \
        <= set(_images(write_report(gigpo).read_text()))
    assert not any(t.startswith("GiGPO") for t in _images(write_report(full_run(tmp_path / "grpo")).read_text()))


def test_the_rollout_trainer_kl_panel_plots_k3_and_k1_only_for_runs_without_it(monkeypatch):
    """k1's step mean goes below 0 and reads as noise; the panel plots k3 (≥ 0), as the update-KL panel's dashed line."""
    from evaluation.reports import run_figures as report_figures

    both = [{"step": s, "rollout_corr/kl": -0.002 * s, "rollout_corr/k3_kl": 0.003 * s} for s in (1, 2, 3)]
    old = [{"step": s, "rollout_corr/kl": 0.001 * s} for s in (1, 2, 3)]
    drawn = []
    monkeypatch.setattr(report_figures, "png", lambda fig: drawn.append(fig) or "image")
    for records, plotted in ((both, [0.003, 0.006, 0.009]), (old, [0.001, 0.002, 0.003])):
        report_figures.dynamics([report_figures.RunData("run", None, records)])
        (ax,) = [ax for ax in drawn[-1].axes if ax.get_title().startswith("rollout-trainer KL")]
        (line,) = ax.get_lines()
        assert list(line.get_ydata()) == pytest.approx(plotted)
        report_figures.plt.close(drawn[-1])


def test_the_staleness_panel_plots_the_tokens_versions_behind_mean_and_max(monkeypatch):
    from evaluation.reports import run_figures as report_figures

    records = [{"step": s, "rollout/reward": 0.1, "rollout/token_staleness_mean": min(s - 1, 2) * 0.5,
                "rollout/token_staleness_max": float(min(s - 1, 2))} for s in (1, 2, 3, 4)]
    drawn = []
    monkeypatch.setattr(report_figures, "png", lambda fig: drawn.append(fig) or "image")
    figure = report_figures.dynamics([report_figures.RunData("run", None, records)])
    (ax,) = [ax for ax in drawn[-1].axes if ax.get_title().startswith("token staleness")]
    mean, top = ax.get_lines()
    assert list(mean.get_ydata()) == [0.0, 0.5, 1.0, 1.0] and list(top.get_ydata()) == [0.0, 1.0, 2.0, 2.0]
    assert "token staleness" not in figure.missing
    report_figures.plt.close(drawn[-1])
