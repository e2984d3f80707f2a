"""The Capacity tab: the plan for the budget, its planner thread, and setting files in and out."""

from batchscope.ui.capacity.presenter import CapacityPresenter
from batchscope.ui.capacity.view import CapacityView

__all__ = ["CapacityPresenter", "CapacityView"]
