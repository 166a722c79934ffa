"""``pdbgym demo``: the experiment file shipped in this package (``demo.toml``) run by ``pdbgym experiment run``'s
stages and report, with the demo's flags laid over it (``config``), and its command (``commands``)."""
