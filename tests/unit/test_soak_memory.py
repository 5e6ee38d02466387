"""The soak's memory verdict (`strongroom.chaos.soak.memory_growth`), in-process."""

from __future__ import annotations

import pytest

from strongroom.chaos.soak import MAX_GROWTH, Sample, memory_growth

MIB = 2**20


def _run(seconds: float, rss_at: object) -> list[Sample]:
    return [Sample(float(t), m, int(rss_at(t, m) * MIB))  # type: ignore[operator]
            for t in range(0, int(seconds), 10) for m in ("m1", "m2", "m3")]


def test_flat_memory_after_the_first_window_passes_and_warm_up_does_not_count() -> None:
    # Growing for the first ten minutes (caches, the log up to its first compaction), flat after.
    samples = _run(3600, lambda t, m: min(t, 600) / 10 + 100)
    baseline, final, growth = memory_growth(samples, 3600)
    assert baseline == final == 160 * MIB and growth == 0.0


def test_steady_growth_fails_and_a_restarted_member_does_not_hide_it() -> None:
    # 150 MiB growing 0.5 MiB a minute; m3 restarted by a kill near the end (small again).
    samples = _run(3600, lambda t, m: 40 if m == "m3" and t > 3400 else 150 + t / 120)
    baseline, final, growth = memory_growth(samples, 3600)
    assert growth > MAX_GROWTH, (baseline / MIB, final / MIB)


def test_a_short_run_scales_its_windows_and_too_few_samples_are_an_error() -> None:
    samples = _run(120, lambda t, m: 100)
    assert memory_growth(samples, 120) == (100 * MIB, 100 * MIB, 0.0)  # windows 20-30 s and the last 10 s
    with pytest.raises(ValueError, match="too few memory samples"):
        memory_growth(samples[:3], 120)


def test_a_run_stopped_early_takes_its_first_reading_after_the_first_sixth_as_the_baseline() -> None:
    # Readings every 10 s and one when the faults stop. Stopped at 45 s: the baseline window
    # (7.5-11.25 s) holds the reading at 10 s; stopped at 35 s, none falls in 5.8-8.75 s, so the
    # window begins with the reading at 10 s.
    for stopped, last in ((45, 145), (35, 135)):
        samples = _run(stopped, lambda t, m: 100 + t) + [Sample(float(stopped), m, (100 + stopped) * MIB)
                                                          for m in ("m1", "m2", "m3")]
        assert memory_growth(samples, stopped) == (110 * MIB, last * MIB, last / 110 - 1)
    with pytest.raises(ValueError, match="too few memory samples"):  # nothing after the first sixth
        memory_growth(_run(35, lambda t, m: 100)[:3], 35)


def test_a_backlog_that_grows_fails_the_soak_for_that_reason() -> None:
    """Memory that grows with the backlog is no leak: the soak says the consumers fell behind."""
    from strongroom.chaos.soak import BACKLOG_SLACK, SoakResult, backlog_growth

    steady = [(float(t), 3000 + (t // 10) % 7 * 100) for t in range(0, 3600, 10)]
    assert backlog_growth(steady, 3600) == (3300.0, 3300.0)
    behind = [(float(t), 20 * t) for t in range(0, 3600, 10)]  # 20 messages a second not taken
    base, final = backlog_growth(behind, 3600)
    assert (base, final) == (14900.0, 68900.0)  # medians of 600-890 s and 3300-3590 s
    result = SoakResult(scenario=None, soak=None, seconds=3600)  # type: ignore[arg-type]
    result.backlog_baseline, result.backlog_final = base, final
    assert result.backlog_grew
    result.backlog_baseline, result.backlog_final = 3300.0, 3300.0 + BACKLOG_SLACK
    assert not result.backlog_grew
    assert backlog_growth([], 3600) == (0.0, 0.0)
