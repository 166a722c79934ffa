"""pdbgym.sandbox"""
