"""pdbgym.agent"""
