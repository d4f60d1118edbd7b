"""The report page: one self-contained HTML file (inline CSS, PNGs as data URIs, no scripts).

Everything the page shows is escaped; nothing is fetched when it opens, so it can be mailed, attached
to an issue, or opened on a machine with no network.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from reinforge.report.plots import Panel
from reinforge.report.runs import Run, best_and_worst

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; width: 100%; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
td pre { margin: 0; padding: 0.3em; white-space: pre-wrap; word-break: break-word; max-height: 16em; overflow-y: auto; }
.panels { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1em; }
figure { margin: 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.note { color: #8a6d3b; background: #fcf8e3; padding: 0.4em 0.8em; border-radius: 4px; }
.muted { color: #777; }
"""


def render_page(runs: list[Run], panels: list[Panel], images: dict[str, Path], samples_per_side: int) -> str:
    """The whole page; `images` maps a panel name to its PNG, embedded as a data URI."""
    title = "reinforge run report: " + ", ".join(run.name for run in runs)
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{_e(title)}</title>",
             f"<style>{STYLE}</style>\n</head>\n<body>", f"<h1>{_e(title)}</h1>", _summary(runs), "<h2>Curves</h2>",
             "<div class=\"panels\">"]
    for panel in panels:
        if panel.figure is None:
            parts.append(f"<figure><h3>{_e(panel.title)}</h3>\n<p class=\"note\">{_e(panel.note)}</p></figure>")
            continue
        data = base64.b64encode(images[panel.name].read_bytes()).decode("ascii")
        note = f"\n<p class=\"note\">{_e(panel.note)}</p>" if panel.note else ""
        parts.append(f"<figure><img alt=\"{_e(panel.title)}\" src=\"data:image/png;base64,{data}\">{note}</figure>")
    parts.append("</div>\n<h2>Samples</h2>")
    parts += [_samples(run, samples_per_side, len(runs) > 1) for run in runs]
    parts.append("<h2>Resolved config</h2>")
    for run in runs:
        heading = f"<h3>{_e(run.name)}</h3>" if len(runs) > 1 else ""
        body = _e(run.config_text) if run.config_text else "(no config.yaml in this run folder)"
        parts.append(f"{heading}<details><summary>config.yaml</summary><pre>{body}</pre></details>")
    parts.append("</body>\n</html>\n")
    return "\n".join(parts)


# C0 control characters other than tab, newline and carriage return, shown as their Unicode control pictures (NUL -> ␀):
# HTML does not allow them in a page, and a response may hold any of them
CONTROL_PICTURES = {code: 0x2400 + code for code in range(32) if chr(code) not in "\t\n\r"} | {0x7F: 0x2421}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True).translate(CONTROL_PICTURES)


def _last(run: Run, key: str) -> str:
    steps, values = run.series(key)
    return f"{values[-1]:.4g}" if values else "–"


def _summary(run_list: list[Run]) -> str:
    rows = []
    for run in run_list:
        timing = "timing_s/step" if "timing_s/step" in run.keys() else "train/time(s)"  # an RL run's, or an SFT run's
        steps = [int(r["step"]) for r in run.records if timing in r]
        total = sum(run.series(timing)[1])
        val_keys = sorted(k for k in run.keys() if k.startswith("val-core/")) or (["val/loss"] if "val/loss" in run.keys() else [])
        val = ", ".join(f"{k.removeprefix('val-core/')} {_last(run, k)}" for k in val_keys) or "–"
        rows.append(f"<tr><td>{_e(run.name)}</td><td class=\"muted\">{_e(run.path.resolve())}</td>"
                    f"<td class=\"num\">{max(steps) if steps else 0}</td><td class=\"num\">{_last(run, 'critic/score/mean')}</td>"
                    f"<td>{_e(val)}</td><td class=\"num\">{total:.1f}</td></tr>")
    head = ("<tr><th>run</th><th>folder</th><th>steps</th><th>last reward</th><th>last validation</th>"
            "<th>train time (s)</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _samples(run: Run, count: int, several: bool) -> str:
    heading = f"<h3>{_e(run.name)}</h3>" if several else ""
    if not run.samples:
        return (f"{heading}<p class=\"note\">No rollout samples in this run folder (the trainer keeps the latest steps' "
                "samples in rollouts/, or in trainer.rollout_data_dir when set).</p>")
    steps = sorted({s.get("step") for s in run.samples if s.get("step") is not None})
    best, worst = best_and_worst(run.samples, count)
    span = f"steps {steps[0]}–{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}" if steps else "the latest steps"
    return (f"{heading}<p class=\"muted\">From {len(run.samples)} responses of {span}.</p>"
            f"<h4>Best by score</h4>{_sample_table(best)}<h4>Worst by score</h4>{_sample_table(worst)}")


def _sample_table(samples: list[dict]) -> str:
    head = "<tr><th>step</th><th>score</th><th>prompt</th><th>response</th><th>ground truth</th></tr>"
    rows = [f"<tr><td class=\"num\">{_e(s.get('step', ''))}</td><td class=\"num\">{s['score']:.4g}</td>"
            f"<td><pre>{_e(s.get('input', ''))}</pre></td><td><pre>{_e(s.get('output', ''))}</pre></td>"
            f"<td><pre>{_e(s.get('gts', ''))}</pre></td></tr>" for s in samples]
    return f"<table>{head}{''.join(rows)}</table>" if rows else "<p class=\"muted\">(none)</p>"
