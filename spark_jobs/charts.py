"""PNG charts of a job's per-minute series (matplotlib, no display needed): users would rather
look at a backlog curve than read one."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; before pyplot is imported
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

from spark_jobs.output import Result

__all__ = ["draw"]


def _label(row: dict[str, Any]) -> str:
    durable = row.get("durable")
    if durable is None:
        return str(row["store"])
    return f"{row['destination']}/{durable or '(queue)'}"


def _lines(ax: Any, rows: list[dict[str, Any]], value: str, title: str, unit: str) -> None:
    series: dict[str, tuple[list[datetime], list[float]]] = defaultdict(lambda: ([], []))
    for r in rows:
        if r.get(value) is None:
            continue
        xs, ys = series[_label(r)]
        xs.append(datetime.fromtimestamp(r["minute"] / 1e6, UTC))
        ys.append(r[value])
    for label, (xs, ys) in sorted(series.items()):
        ax.plot(xs, ys, label=label, linewidth=1.2)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(unit)
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))
    if series:
        ax.legend(fontsize=7, loc="upper left")


def draw(result: Result, directory: Path) -> list[Path]:
    """The job's charts into `directory`; returns their paths."""
    if result.job == "backlog":
        panels = [("durable_series", "pending_messages", "pending messages per durable", "messages"),
                  ("durable_series", "oldest_age_s", "oldest pending message's age", "seconds"),
                  ("durable_series", "redelivery_waiting", "waiting for redelivery", "messages"),
                  ("store_series", "messages", "messages stored per store", "messages")]
        name = "backlog.png"
    else:
        panels = [("stores", "publish_rate", "publish rate per store", "messages/s"),
                  ("durables", "ack_rate", "ack rate per durable", "acks/s"),
                  ("durables", "latency_ms_p99", "publish → ack latency p99", "ms"),
                  ("stores", "size_p50", "message size p50 per store", "bytes")]
        name = "rates.png"
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3 * len(panels)), sharex=True)
    for ax, (table, value, title, unit) in zip(axes, panels, strict=True):
        _lines(ax, result.tables[table], value, title, unit)
    axes[-1].set_xlabel("time (UTC)")
    fig.tight_layout()
    path = directory / name
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [path]
