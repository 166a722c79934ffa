"""pdbgym.divergence: KL/JSD of models against a teacher cache. Code outside the library asks for KL to a
cache through ``pdbgym.divergence.tocache.kl_to_cache`` (one aggregation, documented there)."""
