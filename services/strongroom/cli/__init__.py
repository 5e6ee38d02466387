"""The `strongroom` command line."""
