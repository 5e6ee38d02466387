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
