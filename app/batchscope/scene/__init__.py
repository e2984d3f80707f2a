"""The synthetic table-tennis scene: drawing (``synthetic``) and ball physics (``rally``).

A layer below the engine: ``engine/sources.py`` wraps the scene as a frame source, and
tests, benchmarks and ``sample_videos/make_samples.py`` use it directly. Nothing here
imports ``batchscope.engine`` (or Qt): it only knows numpy, OpenCV and metres.
"""
