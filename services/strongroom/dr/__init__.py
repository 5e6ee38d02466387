"""Disaster recovery: a cluster's standby set at another site, fed asynchronously from the
primary's committed log (design and plan: docs/dr.md)."""
