"""The dashboard's presenter, the one thread that changes the engine on its behalf, and
the run's history the time plots draw."""

from batchscope.ui.live.presenter import Presenter
from batchscope.ui.live.run_history import RunHistory

__all__ = ["Presenter", "RunHistory"]
