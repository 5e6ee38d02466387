"""Strongroom's Spark jobs over the store event log (`strongroom.events.schema`).

- `backlog`: every store's and durable's backlog at an as-of time and per minute;
- `store_metrics`: per store and durable per minute: rates, latency, sizes, losses;
- `all`: both, on one Spark application (the JVM starts once).

Each runs as `spark-submit spark_jobs/<job>.py --events DIR ...`, as `strongroom metrics
backlog|store|all` (Spark local mode), or on Kubernetes from the chart's CronJob.
"""

JOBS = {"backlog": "spark_jobs.backlog", "store": "spark_jobs.store_metrics", "all": "spark_jobs.all"}
"""`strongroom metrics` command names and the job modules they run."""
