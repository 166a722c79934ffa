"""pdbgym.train"""
