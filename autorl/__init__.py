"""autorl: Agent² RL-Bench as a Ray-distributed experiment scheduler.

Importing this package is cheap: it never imports torch, transformers or Ray.
"""

__version__ = "0.1.0"
