"""The report's plots: one matplotlib Figure per panel, every run overlaid with a legend.

Figures are built with `matplotlib.figure.Figure` and the Agg canvas, never pyplot, so no GUI
backend or global state is touched and `reinforge train` never imports matplotlib (this module is
imported only by `reinforge report`). A panel whose metrics no run logged comes back as a `Panel`
with no figure and a note saying which keys were missing; the report shows the note instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from reinforge.report.runs import Run


@dataclass(frozen=True)
class LinePanel:
    """A line plot of the first of `keys` each run has (several keys when `all_keys`)."""

    name: str  # PNG file stem
    title: str
    ylabel: str
    keys: tuple[str, ...]
    all_keys: bool = False  # plot every listed key a run has, not only the first


LINE_PANELS = (
    LinePanel("reward", "Training reward", "mean sequence score (critic/score/mean)", ("critic/score/mean",)),
    LinePanel("response_length", "Response length", "tokens (response_length/mean)", ("response_length/mean",)),
    LinePanel("kl", "KL to the reference / old policy", "KL", ("actor/kl_loss", "actor/ppo_kl", "actor/reward_kl_penalty"), all_keys=True),
    LinePanel("entropy", "Policy entropy", "nats per token (actor/entropy)", ("actor/entropy",)),
    LinePanel("clipfrac", "Clip fraction", "fraction of tokens clipped (actor/pg_clipfrac)", ("actor/pg_clipfrac",)),
    LinePanel("grad_norm", "Gradient norm", "norm before clipping (actor/grad_norm)", ("actor/grad_norm", "train/grad_norm")),
    LinePanel("lr", "Learning rate", "actor/lr", ("actor/lr", "train/lr")),
    LinePanel("throughput", "Throughput", "tokens per second (perf/throughput)", ("perf/throughput",)),
)
VALIDATION_PREFIXES = ("val-core/",)
TIMING_PREFIX = "timing_s/"
TIMING_TOTAL = "timing_s/step"  # the whole step: the sum of its phases, not a phase to stack


@dataclass
class Panel:
    """One panel of the report: a figure, or None and a note saying why it is missing. A figure's note (shown under it)
    names the values it could not draw: NaN or infinite."""

    name: str
    title: str
    figure: Figure | None
    note: str = ""


# the runs of `reinforge sft`: the loss, then the gradient norm and the learning rate
SFT_PANELS = (LinePanel("loss", "Loss", "mean NLL per trained token", ("train/loss", "val/loss"), all_keys=True),
              LINE_PANELS[5], LINE_PANELS[6])


def build_panels(runs: list[Run]) -> list[Panel]:
    """All panels in page order: reward, validation, the line panels, then the timing breakdown (`reinforge sft` runs
    alone: the SFT panels)."""
    if all("train/loss" in run.keys() for run in runs):
        return [_line_panel(runs, spec) for spec in SFT_PANELS]
    panels = [_line_panel(runs, LINE_PANELS[0]), _validation_panel(runs)]
    panels += [_line_panel(runs, spec) for spec in LINE_PANELS[1:]]
    panels.insert(len(panels) - 1, _timing_panel(runs))  # throughput last
    return panels


def _new_axes(title: str, ylabel: str, height: float = 3.6):
    figure = Figure(figsize=(7.5, height), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title)
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(True, alpha=0.3)
    return figure, axes


def _label(run: Run, key: str, runs: list[Run], keys_shown: int) -> str:
    if keys_shown == 1:
        return run.name if len(runs) > 1 else key
    return f"{run.name}: {key}" if len(runs) > 1 else key


def _line_panel(runs: list[Run], spec: LinePanel) -> Panel:
    chosen = {}
    for run in runs:
        present = [key for key in spec.keys if key in run.keys()]
        chosen[run.name] = present if spec.all_keys else present[:1]
    shown = {key for keys in chosen.values() for key in keys}
    if not shown:
        return Panel(spec.name, spec.title, None, f"skipped: no run logged {' or '.join(spec.keys)}")
    figure, axes = _new_axes(spec.title, spec.ylabel)
    not_finite = []
    for run in runs:
        for key in chosen[run.name]:
            steps, values = run.series(key)
            axes.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3,
                      label=_label(run, key, runs, len(shown)))
            not_finite += _mark_not_finite(axes, run, key, steps, values, len(runs) > 1)
    axes.legend(fontsize="small")
    return Panel(spec.name, spec.title, figure, _not_finite_note(not_finite))


def _mark_not_finite(axes, run: Run, key: str, steps: list[int], values: list[float], several_runs: bool) -> list[str]:
    """Red crosses on the bottom edge at the steps where `key` is NaN or infinite (the line has a gap there: a diverged
    step stays visible); returns "key (run): steps ..." for the panel's note, nothing when every value is finite."""
    bad = [(step, value) for step, value in zip(steps, values, strict=True) if not math.isfinite(value)]
    if not bad:
        return []
    axes.plot([step for step, _ in bad], [0.0] * len(bad), linestyle="none", marker="x", color="red", markersize=7,
              clip_on=False, transform=axes.get_xaxis_transform())
    where = f"{key} ({run.name})" if several_runs else key
    return [f"{where}: " + ", ".join(f"step {step} {value}" for step, value in bad)]


def _not_finite_note(lines: list[str]) -> str:
    return "not finite (red crosses, gaps in the line): " + "; ".join(lines) if lines else ""


def _validation_panel(runs: list[Run]) -> Panel:
    title = "Validation reward"
    keys = {run.name: sorted(k for k in run.keys() if k.startswith(VALIDATION_PREFIXES)) for run in runs}
    shown = {key for run_keys in keys.values() for key in run_keys}
    if not shown:
        return Panel("validation", title, None, "skipped: no validation metrics (val-core/...); set trainer.test_freq "
                                                "or trainer.val_before_train=true")
    figure, axes = _new_axes(title, "validation metric (val-core/<data_source>/...)")
    not_finite = []
    for run in runs:
        for key in keys[run.name]:
            steps, values = run.series(key)
            axes.plot(steps, values, marker="s", markersize=4, label=_label(run, key, runs, len(shown)))
            not_finite += _mark_not_finite(axes, run, key, steps, values, len(runs) > 1)
    axes.legend(fontsize="small")
    return Panel("validation", title, figure, _not_finite_note(not_finite))


def _timing_panel(runs: list[Run]) -> Panel:
    """Stacked bars of the phase times of each step, one axes per run on a shared scale (stacked bars cannot overlay)."""
    title = "Time per step by phase"
    phases = {run.name: sorted({k for k in run.keys() if k.startswith(TIMING_PREFIX) and k != TIMING_TOTAL}) for run in runs}
    timed = [run for run in runs if phases[run.name]]
    if not timed:
        return Panel("timing", title, None, f"skipped: no run logged {TIMING_PREFIX}<phase> metrics")
    figure = Figure(figsize=(7.5, 3.2 * len(timed) + 0.6), dpi=100, layout="constrained")
    all_phases = sorted({p for run in timed for p in phases[run.name]})
    colours = {phase: f"C{i % 10}" for i, phase in enumerate(all_phases)}
    grid = figure.subplots(len(timed), 1, sharey=True, squeeze=False)  # one seconds scale, so runs compare
    for axes, run in zip(grid[:, 0], timed, strict=True):
        axes.set_title(f"{title}: {run.name}" if len(runs) > 1 else title)
        axes.set_xlabel("training step")
        axes.set_ylabel("seconds (timing_s/<phase>)")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        steps = sorted({int(r["step"]) for r in run.records if "step" in r and any(p in r for p in phases[run.name])})
        bottom = [0.0] * len(steps)
        for phase in phases[run.name]:
            values = dict(zip(*run.series(phase), strict=True))
            heights = [values.get(step, 0.0) for step in steps]
            axes.bar(steps, heights, bottom=bottom, color=colours[phase], label=phase.removeprefix(TIMING_PREFIX))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        axes.legend(fontsize="x-small", ncols=3)
    return Panel("timing", title, figure)
