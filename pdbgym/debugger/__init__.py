"""pdbgym.debugger"""
