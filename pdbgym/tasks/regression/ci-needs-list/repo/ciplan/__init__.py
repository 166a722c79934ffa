"""CI pipelines: read a pipeline file, resolve job dependencies, plan parallel stages."""
