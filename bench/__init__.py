"""Strongroom's benchmark suite: the same workloads against Strongroom and a NATS JetStream
cluster, side by side in one run. `strongroom bench`, `make bench` or `python -m bench`."""
