"""Open generated reports in headless Chromium: the DOM holds the headline, scripts in model output
stay inert, and a screenshot is a real, non-blank page.

Needs Debian's ``chromium`` at /usr/bin/chromium, or a ``chromium`` on PATH (the README's setup line and
.ci/run install it when missing).
"""

import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from dgrpo.report import write_report

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.glob('profile*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.parametrize("which, headline, asr", [("undefended_run", "dgrpo report: undefended", "100.0%"),
                                                  ("defended_run", "dgrpo report: defended", "0.0%")])
def test_report_renders_in_chromium(request, tmp_path, which, headline, asr):
    assert Path(CHROMIUM).exists(), "install Debian's chromium (apt-get install chromium); .ci/run does"
    report = write_report([request.getfixturevalue(which)])
    url = report.resolve().as_uri()

    dom = chromium(tmp_path, "--dump-dom", url).stdout
    assert f'<h1 id="headline">{headline}</h1>' in dom
    assert f"<title>{headline}</title>" in dom  # the injected script did not set document.title
    assert f'<div class="v">{asr}</div><div class="k">final ASR</div>' in dom
    assert dom.count("<svg") >= 3 and "honest mean" in dom
    assert "&lt;script&gt;" in dom and "<img" not in dom

    shot = tmp_path / "shot.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1100,900", url)
    pixels = mpimg.imread(shot)[..., :3]  # (H, W, 3) floats in [0, 1]
    assert pixels.shape[:2] == (900, 1100)
    ink = (pixels.mean(axis=2) < 0.6).mean()  # dark pixels: text and chart lines
    assert 0.005 < ink < 0.5, ink
    assert np.unique(pixels.reshape(-1, 3), axis=0).shape[0] > 20  # many colours: charts, not a blank page


def test_comparison_renders_in_chromium(undefended_run, defended_run, tmp_path):
    report = write_report([undefended_run, defended_run], tmp_path / "cmp.html")
    dom = chromium(tmp_path, "--dump-dom", report.resolve().as_uri()).stdout
    assert "dgrpo comparison: 2 runs" in dom and "defended: topk detection rate" in dom
