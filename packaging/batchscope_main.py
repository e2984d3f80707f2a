"""Entry point of the packaged app (PyInstaller runs this file)."""

from batchscope.cli import main

raise SystemExit(main())
