"""pdbgym.env"""
