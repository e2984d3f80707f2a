#!/usr/bin/env bash
# Build the one-folder app into dist/batchscope/ and check that it starts.
#   bash packaging/build.sh          (inside the project's venv)
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install "pyinstaller>=6.10"
python -m PyInstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller \
    packaging/batchscope.spec
echo "built: dist/batchscope ($(du -sh dist/batchscope | cut -f1))"
QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen} dist/batchscope/batchscope gui \
    --screenshot dist/packaged-screenshot.png --after 5
echo "screenshot: dist/packaged-screenshot.png"
