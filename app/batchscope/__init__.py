"""BatchScope: a desktop lab for live batching experiments on a multi-session vision worker."""

__version__ = "0.1.0"
