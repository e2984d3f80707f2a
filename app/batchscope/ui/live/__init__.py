"""The dashboard's presenter and the one thread that changes the engine on its behalf."""

from batchscope.ui.live.presenter import Presenter

__all__ = ["Presenter"]
