"""The robustness and `alprl eval` reports render in a real browser: headless Chromium loads the page, every embedded
PNG decodes (naturalWidth > 0), and a screenshot of the page is not blank. The robustness report shows every
interval of its robustness.json: in each plot, one whisker per interval (counted in the decoded pixels), and in its
table, each condition's intervals as the JSON gives them. The run report (several runs overlaid): every figure is
there, decodes, is not blank (grey-level variance on a canvas) and the page logs no console error.

Needs the Debian `chromium` package (`apt-get install -y chromium`); skipped with that reason without it.
"""

import html
import json
import re
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from evaluation.reports.eval_report import summarize_eval, write_eval_report
from evaluation.reports.robustness_report import INTERVAL_COLOR, write_robustness_report

CHROMIUM = Path("/usr/bin/chromium")
NO_BROWSER = "no /usr/bin/chromium: install the browser with `apt-get install -y chromium` (as root)"
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_BROWSER)

# Runs after every image has loaded or failed ('load' waits for both) and records the outcome in the DOM.
CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  document.body.dataset.images = imgs.length;
  document.body.dataset.decoded = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.widths = imgs.map(i => i.naturalWidth).join(',');
});
</script>"""


def _records():
    out = []
    grid = (("clean", [0.0]), ("noise", [0.1, 0.3]), ("prune", [0.5]), ("quant", ["int8", "int4"]))
    for family, scales in grid:
        for rank, scale in enumerate(scales):
            for i in range(6):  # success falls with the scale's rank: 6, 5, 4 ... of 6 episodes won
                won = i < 6 - (rank + (family != "clean"))
                out.append({"index": i, "sample": 0, "task_type": "add" if i % 2 else "multiply", "won": won,
                            "reward": float(won), "family": family, "scale": scale,
                            "condition": f"{family}@{scale}", "probe_kl": 0.1 * rank})
    return out


def _interval_records():
    """12 tasks × 2 samples; clean wins 3 of 4 samples and each condition loses some of them, unevenly over tasks,
    so every success, change and retention interval has a width (a whisker, not only its caps)."""
    out = []
    grid = (("clean", [0.0]), ("noise", [0.1, 0.3]), ("prune", [0.5]), ("quant", ["int8", "int4"]))
    for family, scales in grid:
        for rank, scale in enumerate(scales):
            for i in range(12):
                for j in range(2):
                    lost = (i * 6 + j * 4 + rank + len(family)) % (5 - rank) == 0  # a fixed, uneven pattern
                    won = (i + j) % 4 != 0 and (family == "clean" or not lost)
                    out.append({"index": i, "sample": j, "task_type": "add" if i % 2 else "multiply", "won": won,
                                "reward": float(won), "family": family, "scale": scale,
                                "condition": f"{family}@{scale}", "probe_kl": 0.1 * (rank + 1)})
    return out


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _eval_page(tmp_path: Path) -> Path:
    records = {name: [{"index": i, "sample": j, "won": (i + j) % 3 == 0, "extracted_answer": str(j), "reward": 0.0,
                       "response_tokens": 9, "turns": 1, "tool_calls": 0} for i in range(5) for j in range(4)]
               for name in ("math500", "aime24")}
    return write_eval_report(tmp_path / "eval", summarize_eval(records, {"label": "synthetic"}, {}))


@pytest.mark.parametrize("report,expected", [("robustness", 6), ("eval", 2)])
def test_report_images_decode_in_headless_chromium(tmp_path, report, expected):
    # robustness: success × 3 families, change, retention, probe KL; eval: a pass@k curve per benchmark
    page = (write_robustness_report(tmp_path / "report", _records(), {"checkpoint": "synthetic"})
            if report == "robustness" else _eval_page(tmp_path))
    embedded = page.read_text().count("src='data:image/png;base64,")
    assert embedded == expected
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    dom = _chromium(tmp_path, "--dump-dom", checked.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, dom.stdout[:500]
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', body.group(1)))
    assert attrs.get("images") == str(embedded) and attrs.get("decoded") == str(embedded), attrs
    assert all(int(w) >= 300 for w in attrs["widths"].split(",")), attrs  # plots are ≥ 300 px wide


def test_report_screenshot_is_not_blank(tmp_path):
    page = write_robustness_report(tmp_path / "report", _records())
    shot = tmp_path / "shot.png"
    run = _chromium(tmp_path, "--window-size=1000,2400", f"--screenshot={shot}", page.as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = matplotlib.image.imread(shot)[..., :3]  # (H, W, 3) floats in [0, 1]
    non_white = (pixels < 0.95).any(-1).mean()
    # The page's own text and borders are black/grey: the retention plot's green bars (#33aa77) can only
    # come from a decoded image.
    green = (np.abs(pixels - np.array([0x33, 0xAA, 0x77]) / 255) < 12 / 255).all(-1).sum()
    assert non_white > 0.02 and green > 5000, (non_white, green)


# After load: per image, the connected blobs (8-neighbour) of pixels in the interval colour (each channel within 12 of
# 255), larger than 20 pixels: one whisker with its caps is one blob. And the text of the report's first table after
# the plots (the condition table), row by row. Written into the DOM for --dump-dom.
INTERVALS = """<script>
window.addEventListener('load', () => {
  const [r0, g0, b0] = [1, 3, 5].map(i => parseInt('COLOR'.substr(i, 2), 16));
  const images = [...document.images].map(img => {
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data, w = c.width, h = c.height;
    const hit = new Uint8Array(w * h);
    for (let p = 0; p < w * h; p++)
      hit[p] = Math.abs(d[4 * p] - r0) <= 12 && Math.abs(d[4 * p + 1] - g0) <= 12 && Math.abs(d[4 * p + 2] - b0) <= 12;
    let blobs = 0;
    for (let p = 0; p < w * h; p++) {
      if (hit[p] !== 1) continue;
      let size = 0; const stack = [p]; hit[p] = 2;
      while (stack.length) {
        const q = stack.pop(); size++;
        const x = q % w, y = (q - x) / w;
        for (let dy = -1; dy <= 1; dy++) for (let dx = -1; dx <= 1; dx++) {
          const nx = x + dx, ny = y + dy, n = ny * w + nx;
          if (nx >= 0 && ny >= 0 && nx < w && ny < h && hit[n] === 1) { hit[n] = 2; stack.push(n); }
        }
      }
      if (size > 20) blobs++;
    }
    return {alt: img.alt, blobs: blobs};
  });
  const rows = [...document.querySelectorAll('table')[1].rows].map(r => [...r.cells].map(c => c.textContent));
  const pre = document.createElement('pre');
  pre.id = 'intervals';
  pre.textContent = JSON.stringify({images: images, rows: rows});
  document.body.appendChild(pre);
});
</script>""".replace("COLOR", INTERVAL_COLOR)


def _shown(ci, scale=100.0, digits=1, signed=False):
    """How the page writes an interval (to compare its cells with robustness.json)."""
    number = (lambda v: f"{v * scale:+.{digits}f}") if signed else (lambda v: f"{v * scale:.{digits}f}")
    return "—" if ci is None else f"[{number(ci[0])}, {'∞' if ci[1] is None else number(ci[1])}]"


def test_robustness_report_shows_every_interval_in_headless_chromium(tmp_path):
    page = write_robustness_report(tmp_path / "report", _interval_records())
    saved = json.loads((tmp_path / "report" / "robustness.json").read_text())
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("</body>", INTERVALS + "</body>"))
    dom = _chromium(tmp_path, "--dump-dom", checked.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r"<pre id=\"intervals\">(.*?)</pre>", dom.stdout, re.S)
    assert found, dom.stdout[-1000:]
    shown = json.loads(html.unescape(found.group(1)))
    blobs = {img["alt"]: img["blobs"] for img in shown["images"]}
    curves = saved["curves"]
    # every point with an interval is drawn with one whisker, and nothing else is in that colour (probe KL: none)
    # but the success plots' legend sample of a whisker
    expected = {f"success_{f}": 1 + sum(ci is not None for ci in c["success_ci"]) for f, c in curves.items()}
    expected |= {"change": sum(ci is not None for c in curves.values() for ci in c["change_ci"]),
                 "retention": sum(ci is not None for c in curves.values() for ci in c["retention_ci"]),
                 "probe_kl": 0}
    assert expected["change"] == expected["retention"] == 5 and expected["success_noise"] == 1 + 3
    assert blobs == expected, (blobs, expected)
    # the condition table: every interval of robustness.json, as the page writes it
    header, *rows = shown["rows"]
    assert header[:9] == ["family", "scale", "episodes", "success %", "95% CI", "change vs clean, points",
                          "95% CI (paired)", "retention", "95% CI"], header
    assert len(rows) == len(saved["conditions"]) == 6
    for cells, row in zip(rows, saved["conditions"], strict=True):
        assert cells[4] == _shown(row["success_ci"]) and cells[6] == _shown(row["change_ci"], signed=True)
        assert cells[8] == _shown(row["retention_ci"], scale=1.0, digits=2), (cells, row)
        if row["family"] != "clean":
            assert "—" not in (cells[4], cells[6], cells[8]), cells  # a perturbed condition shows all three


# Installed first in <head>: records every console error, uncaught exception and failed resource load.
CONSOLE = """<script>
window.__errors = [];
const _error = console.error;
console.error = (...a) => { window.__errors.push(a.join(' ')); _error(...a); };
window.addEventListener('error', e => window.__errors.push(String(e.message || (e.target && e.target.src))), true);
</script>"""
# After load: per image, whether it decoded and the variance of its grey levels drawn on a canvas (a blank or
# single-colour PNG has variance 0); with the errors, written into the DOM for --dump-dom.
PIXELS = """<script>
window.addEventListener('load', () => {
  const out = [...document.images].map(img => {
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    if (!img.complete || !c.width) return {alt: img.alt, ok: false, variance: 0};
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    let s = 0, s2 = 0, n = d.length / 4;
    for (let i = 0; i < d.length; i += 4) { const g = (d[i] + d[i + 1] + d[i + 2]) / 3; s += g; s2 += g * g; }
    return {alt: img.alt, ok: true, width: c.width, variance: s2 / n - (s / n) ** 2};
  });
  const pre = document.createElement('pre');
  pre.id = 'check';
  pre.textContent = JSON.stringify({images: out, errors: window.__errors});
  document.body.appendChild(pre);
});
</script>"""


def test_run_report_figures_load_and_are_not_blank_in_headless_chromium(tmp_path):
    from report_runs import full_run

    from evaluation.reports.run_report import write_report

    a, b = full_run(tmp_path / "a"), full_run(tmp_path / "b", spread=0.05, seed=1)
    page = write_report([a, b]).read_text()
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("<head>", "<head>" + CONSOLE, 1).replace("</body>", PIXELS + "</body>"))
    dom = _chromium(tmp_path, "--enable-logging=stderr", "--dump-dom", checked.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r"<pre id=\"check\">(.*?)</pre>", dom.stdout, re.S)
    assert found, dom.stdout[-1000:]
    result = json.loads(html.unescape(found.group(1)))
    titles = [img["alt"] for img in result["images"]]
    for figure in ("Figure 1:", "Figure 2:", "Training dynamics", "Figure 8:", "Figure 10:", "Figure 5:"):
        assert any(t.startswith(figure) for t in titles), (figure, titles)
    for img in result["images"]:
        assert img["ok"] and img["width"] >= 300 and img["variance"] > 50, img  # decoded, a plot, not blank
    assert result["errors"] == [], result["errors"]
    # Chromium logs every console message as INFO:CONSOLE; the report itself logs nothing, so any is unexpected
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
