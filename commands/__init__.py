"""Pure command builders: plain values in, an argv list (and environment) out. Nothing here runs
anything; `tasks.py` runs what these build."""
