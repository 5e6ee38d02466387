"""Observability: what each process counts (`tallies`), the Prometheus metrics it exports
(`catalog`, `member`, `exporter`) and the statistics line it logs (`statslog`)."""
