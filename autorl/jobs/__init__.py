"""Sweeps submitted as one Ray Job (``cluster.jobs_address``; docs/design.md#commands).

``python -m autorl.sweep cluster=<name> ...`` with a cluster file that names a dashboard address
does not run the sweep here: it submits the same sweep command as one Ray Job whose driver joins
the cluster it runs on (``cluster.address=auto``), follows the job's log with the cell table,
stops the job on Ctrl-C (the in-job sweep cancels its cells, so the next run resumes them) and,
when the job ends, downloads the sweep folder into the local ``<out_dir>/<sweep_id>/``.

- :mod:`autorl.jobs.spec`: what is submitted (entry point, runtime env, ids); pure functions.
- :mod:`autorl.jobs.entry`: the job's entry point on the cluster: runs the sweep, then packs its
  folder into the job's log folder.
- :mod:`autorl.jobs.client`: the submitting side: submit or attach, follow, stop, download.

The sweep folder comes back through the dashboard's log API (``/api/v0/logs/file``), the only
HTTP path to a node's files that Ray 2.60 has; the submitting machine needs to reach the dashboard
and nothing else (no shared filesystem, no GCS port).
"""
