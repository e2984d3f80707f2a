"""The HTML report of a run or an experiment: the page, its still charts, its bus pictures.

Only the page is imported here: it loads Qt only to draw, so the CLI imports this
package for :func:`experiment_block` at no cost (``simulate`` starts without Qt).
"""

from batchscope.ui.html_report.page import ReportError, experiment_block, write_html_report

__all__ = ["ReportError", "experiment_block", "write_html_report"]
