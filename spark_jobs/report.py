"""What a job prints on the terminal: a table of its answer at the as-of time, or the summary as
JSON (`--json`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from spark_jobs.output import Result, iso_time, summary, table_text

__all__ = ["show_result", "show_results"]

BACKLOG_COLUMNS = (("store", "STORE"), ("destination", "DESTINATION"), ("durable", "DURABLE"),
                   ("pending_messages", "PENDING"), ("pending_bytes", "BYTES"), ("unacked", "UNACKED"),
                   ("redelivery_waiting", "REDELIVER"), ("oldest_age_s", "OLDEST_AGE_S"))
STORE_COLUMNS = (("store", "STORE"), ("published", "PUBLISHED"), ("publish_rate", "PUB/S"), ("acked", "ACKED"),
                 ("ack_rate", "ACK/S"), ("size_p50", "SIZE_P50"), ("size_p99", "SIZE_P99"), ("expired", "EXPIRED"),
                 ("discarded", "DISCARDED"), ("dead_lettered", "DEAD"))
DURABLE_COLUMNS = (("store", "STORE"), ("destination", "DESTINATION"), ("durable", "DURABLE"), ("acked", "ACKED"),
                   ("ack_rate", "ACK/S"), ("latency_ms_p50", "LAT_P50_MS"), ("latency_ms_p95", "LAT_P95_MS"),
                   ("latency_ms_p99", "LAT_P99_MS"), ("dead_lettered", "DEAD"), ("redelivered", "REDELIVERED"))


def show_result(result: Result, as_json: bool) -> str:
    """The summary as JSON, or a heading and the job's tables as text."""
    if as_json:
        return json.dumps(summary(result), indent=2)
    head = (f"{result.job} as of {iso_time(result.as_of)}: {result.log.rows:,} events in {len(result.log.files)} "
            f"file(s) from {iso_time(result.first)}")
    if result.job == "backlog":
        return "\n".join([head, "", table_text(result.tables["durables"], BACKLOG_COLUMNS), "",
                          table_text(result.tables["stores"], (("store", "STORE"), ("messages", "MESSAGES"),
                                                               ("bytes", "BYTES"), ("oldest_age_s", "OLDEST_AGE_S")))])
    return "\n".join([head, "", table_text(result.summary["stores"], STORE_COLUMNS), "",
                      table_text(result.summary["durables"], DURABLE_COLUMNS)])


def show_results(results: Sequence[Result], as_json: bool) -> str:
    """One job's output as `show_result`; several: their tables one after the other, or one JSON
    object of their summaries by job."""
    if len(results) == 1:
        return show_result(results[0], as_json)
    if as_json:
        return json.dumps({r.job: summary(r) for r in results}, indent=2)
    return "\n\n".join(show_result(r, False) for r in results)
