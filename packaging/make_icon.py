"""Draw the application icon (assets/icon.png, 256×256): a ball with its blur streak over
batch bars. Run: python packaging/make_icon.py"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

SIZE = 256
S = 4  # supersampling for smooth edges


ICON = Path(__file__).resolve().parents[1] / "assets" / "icon.png"


def main(out: Path = ICON) -> Path:
    n = SIZE * S
    img = np.zeros((n, n, 4), np.uint8)
    cv2.rectangle(img, (0, 0), (n - 1, n - 1), (0, 0, 0, 0), -1)
    r = 44 * S
    # rounded dark tile
    tile = np.zeros((n, n), np.uint8)
    cv2.rectangle(tile, (r, 0), (n - r, n), 255, -1)
    cv2.rectangle(tile, (0, r), (n, n - r), 255, -1)
    for cx, cy in ((r, r), (n - r, r), (r, n - r), (n - r, n - r)):
        cv2.circle(tile, (cx, cy), r, 255, -1)
    img[tile > 0] = (58, 36, 24, 255)  # BGRA: deep navy
    # batch bars (blue table colour), growing
    for i, h in enumerate((60, 96, 132, 168)):
        x0 = (40 + i * 46) * S
        cv2.rectangle(img, (x0, (220 - h) * S), (x0 + 34 * S, 220 * S), (170, 110, 40, 255), -1)
    # blur streak and ball (orange)
    for k in range(24):
        t = k / 23
        x, y = int((60 + 110 * t) * S), int((120 - 70 * t + 40 * t * t) * S)
        cv2.circle(img, (x, y), int((10 + 8 * t) * S), (40, 140, 250, int(40 + 100 * t)), -1)
    cv2.circle(img, (int(178 * S), int(86 * S)), 22 * S, (50, 160, 255, 255), -1)
    cv2.circle(img, (int(171 * S), int(79 * S)), 7 * S, (200, 235, 255, 255), -1)
    small = cv2.resize(img, (SIZE, SIZE), interpolation=cv2.INTER_AREA)
    out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out), small)
    return out


if __name__ == "__main__":
    print(main())
