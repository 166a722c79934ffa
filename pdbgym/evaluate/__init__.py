"""pdbgym.evaluate"""
