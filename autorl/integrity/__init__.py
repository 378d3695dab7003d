"""Grader-side integrity checks of a finished cell: eval-data contamination and the optional judge.

Import the modules themselves (``autorl.integrity.contamination``, ``autorl.integrity.judge``); this
package re-exports nothing, so importing one check never imports the other.
"""
