"""pdbgym.tasks"""
