"""``pdbgym demo``: the research loop in miniature: its phases (``phases``), report (``report``) and command (``commands``)."""
