"""Serving engines BatchScope drives as backends (Ray Serve): they form the batches."""
