"""Records become insight: per-cell metrics and run reports, sweep analyses and the HTML report.

``python -m autorl.report <sweep_dir>`` (re)builds everything from the sweep folder alone; the
sweep calls the same :func:`autorl.report.build.build_report` when its cells are done. Importing
this package is cheap (matplotlib is imported only when figures are drawn).
"""
