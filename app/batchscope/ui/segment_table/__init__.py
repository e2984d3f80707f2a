"""The Segments dock: the segment table, what the app adds to its cells, the thread feeding it."""

from batchscope.ui.segment_table.feed import SegmentFeed
from batchscope.ui.segment_table.view import SegmentTable

__all__ = ["SegmentFeed", "SegmentTable"]
