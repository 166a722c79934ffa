"""pdbgym.adapters"""
