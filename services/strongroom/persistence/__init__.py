"""The persistence service: one member of one persistence cluster."""
