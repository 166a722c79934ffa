"""Model backends: one small interface (``base.Backend``), one file per engine."""
