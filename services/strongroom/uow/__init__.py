"""Units of work (EntireX's model) on the replicated log: the replicated table of units of
work and the pseudo-clock (`table.py`), the leader's side of senders and receivers
(`front.py`), its timers (`keeper.py`) and the gRPC servicer (`servicer.py`)."""
