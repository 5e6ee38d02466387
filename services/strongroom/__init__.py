"""Strongroom: a replicated, persistent message store."""
