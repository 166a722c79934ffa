"""pdbgym.divergence"""
