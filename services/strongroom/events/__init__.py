"""The store event log: every change a store goes through, as Parquet rows (see `schema`)."""
