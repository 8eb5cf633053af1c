"""`alprl diagnose`: each reading on a small metrics file built here (alprl's field names, as trainer/loop.py logs
them; verl's nesting and TRL's names through the aliases), its first bad step, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.diagnose import GATE_BOUND, RecordsError, load_records, summarize

# A matched-precision run (fp32 sampler, no quantization, no lag), as `mismatch_report` logs its `mismatch/*` knobs
MATCHED = {"mismatch/sampler_dtype_bits": 32.0, "mismatch/sampler_quant_bits": 0.0, "mismatch/policy_lag": 0.0,
           "mismatch/policy_lag_effective": 0.0}


def _write(tmp_path, records, name="metrics.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path


def _clean(step, **changes):
    return {"step": step, **MATCHED, "rollout/weight_sync_ok": 1.0, "rollout_corr/logp_abs_diff_max": 2e-6,
            "rollout_corr/nonfinite_tokens": 0.0, "rollout_corr/k3_kl": 1e-7, "rollout_corr/drift_alarm": 0.0,
            "rollout_corr/truncation_mass": 0.97, "rollout_corr/truncation_outside_frac": 0.0, **changes}


def _summary(tmp_path, records):
    return summarize(load_records(_write(tmp_path, records)))


def test_a_clean_run_passes_every_reading(tmp_path, capsys):
    _write(tmp_path, [_clean(s) for s in range(1, 6)])
    assert main(["diagnose", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "weight sync: checked at 5 steps, every push held" in out
    assert "zero-mismatch gate: pass" in out and "drift: no alarm" in out
    assert "staleness: policy lag mean 0, max 0" in out
    assert "kept mass mean 0.97" in out and "every sampled token inside" in out
    assert out.strip().endswith("nothing went wrong in the mismatch readings")


def test_weight_sync_failure_is_the_first_bad_step(tmp_path):
    lines, first = _summary(tmp_path, [_clean(1), _clean(2), {"step": 3, "rollout/weight_sync_ok": 0.0}])
    assert first == (3, "weight sync failed")
    assert "weight sync: FAILED at step 3" in "\n".join(lines)


def test_gate_breach_and_non_finite(tmp_path):
    records = [_clean(1), _clean(2, **{"rollout_corr/logp_abs_diff_max": 10 * GATE_BOUND}),
               _clean(3, **{"rollout_corr/nonfinite_tokens": 2.0})]
    lines, first = _summary(tmp_path, records)
    assert first == (2, "zero-mismatch gate breached")
    assert "BREACHED first at step 2" in lines[2] and "non-finite log-probs first at step 3" in lines[2]


def test_gate_does_not_apply_to_a_dialled_mismatch(tmp_path):
    bf16 = {"mismatch/sampler_dtype_bits": 16.0, "rollout_corr/logp_abs_diff_max": 0.05}
    lines, first = _summary(tmp_path, [_clean(s, **bf16) for s in (1, 2)])
    assert first is None and "not applicable (dialled mismatch: a 16-bit sampler)" in lines[2]


def test_drift_from_the_logged_alarm_and_recomputed(tmp_path):
    logged = [_clean(s, **{"rollout_corr/drift_alarm": float(s >= 4)}) for s in range(1, 6)]
    assert _summary(tmp_path, logged)[1] == (4, "mismatch KL drifting up")
    # verl-style records: no alarm logged; a KL rising 0.002 a step from step 11 fires the recomputed one
    kl = [{"step": s, "rollout_corr/k3_kl": 0.002 + 0.002 * max(0, s - 10)} for s in range(1, 31)]
    lines, first = _summary(tmp_path, kl)
    assert first is not None and 11 < first[0] <= 18 and "alarm (recomputed: window 8" in lines[3]


def test_staleness_and_truncation_outside(tmp_path):
    records = [_clean(s, **{"mismatch/policy_lag": 2.0, "mismatch/policy_lag_effective": float(min(s - 1, 2)),
                            "rollout_corr/truncation_outside_frac": 0.01 if s == 3 else 0.0}) for s in (1, 2, 3)]
    lines, _ = _summary(tmp_path, records)
    assert "policy lag mean 1, max 2" in lines[4]
    assert "outside the trainer's kept set first at step 3" in lines[5]


def test_verl_and_trl_records_are_read_by_name(tmp_path):
    verl = [{"step": s, "data": {"rollout_corr/k3_kl": 0.001, "rollout_corr/logp_abs_diff_max": 1e-6}}
            for s in (1, 2)]
    lines, _ = _summary(tmp_path, verl)
    assert "max |Δ log-prob| 1e-06" in lines[2]
    trl = {"log_history": [{"step": 1, "sampling/sampling_logp_difference/max": 0.3, "loss": 0.1}]}
    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "trainer_state.json").write_text(json.dumps(trl))
    lines, first = summarize(load_records(tmp_path / "trl"))
    assert "max |Δ log-prob| 0.3 at step 1" in lines[2] and first == (1, "zero-mismatch gate breached")


@pytest.mark.parametrize("content,message", [
    (None, "no metrics.jsonl"), ("", "no records"), ("{not json\n", "not JSON lines"),
    ('{"loss": 1}\n', "has no integer 'step'")])
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, content, message):
    if content is not None:
        (tmp_path / "metrics.jsonl").write_text(content)
    with pytest.raises(RecordsError, match=message):
        load_records(tmp_path)
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("alprl diagnose: error: ") and err.count("\n") == 1


@pytest.mark.smoke
def test_diagnose_reads_a_real_short_run(tmp_path, sft_dir, capsys):
    """Three steps of the tiny TIR recipe (transformers engine, bf16 sampler) with top-p truncation and the sampler's
    top-5: the run logs the forensics metrics, and `alprl diagnose` reads each of them back."""
    from tiny_tir import SMALL

    from trainer.loop import train
    from trainer.setup.build import build_config

    cfg = build_config(None, SMALL + [f"sft.output_dir={sft_dir}", f"output_dir={tmp_path}", "steps=3",
                                      "rollout.top_p=0.9", "rollout.logprobs_topk=5", "rollout.engine=hf"])
    train(cfg, show_progress=False)
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["rollout/weight_sync_ok"] == 1.0 and record["rollout_corr/full_vocab_kl"] >= 0
    assert "rollout_corr/kl_trend" in record and record["rollout_corr/drift_alarm"] == 0.0
    assert main(["diagnose", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "weight sync: checked at 3 steps, every push held" in out
    assert "zero-mismatch gate: not applicable (dialled mismatch: a 16-bit sampler)" in out
    assert "full-vocabulary KL max" in out and "drift: no alarm" in out
    assert "truncation mass: trainer's kept mass mean" in out
