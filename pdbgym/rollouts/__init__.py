"""pdbgym.rollouts"""
