"""Runtime for the lineage graph (tests, bisection, cascades, training).

The only part of git-mgit that may import torch; filled in by later issues.
"""
