"""The report's figures (matplotlib, Agg backend): each is saved as a PNG file and returned as
bytes.

Every function takes the already-computed analyses (:mod:`autorl.report.aggregate`) and draws
them; none computes statistics itself. An empty input still gives a figure that says what is
missing, so every report section always has one.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from autorl.report.aggregate import Matrix

_DPI = 100


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display: figures are files
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> bytes:
    plt = _pyplot()
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=_DPI)
    plt.close(fig)
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def _empty(ax: Any, message: str) -> None:
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=10,
        color="#666",
    )
    ax.set_xticks([])
    ax.set_yticks([])


def heatmap_figure(matrix: Matrix, title: str, path: Path) -> bytes:
    """Mean improvement per cell of ``matrix`` with the value and the number of runs written in."""
    plt = _pyplot()
    width = max(4.0, 1.3 * len(matrix.cols) + 2.5)
    height = max(2.6, 0.7 * len(matrix.rows) + 1.8)
    fig, ax = plt.subplots(figsize=(width, height))
    if not matrix.rows or not matrix.cols:
        _empty(ax, "no completed cells")
    else:
        import numpy as np

        data = np.array(
            [[np.nan if v is None else v for v in row] for row in matrix.values], dtype=float
        )
        bound = float(np.nanmax(np.abs(data))) if np.isfinite(data).any() else 1.0
        image = ax.imshow(
            data, cmap="RdYlGn", vmin=-bound or -1.0, vmax=bound or 1.0, aspect="auto"
        )
        fig.colorbar(image, ax=ax, label="mean improvement")
        ax.set_xticks(range(len(matrix.cols)), matrix.cols, rotation=30, ha="right")
        ax.set_yticks(range(len(matrix.rows)), matrix.rows)
        for i, row in enumerate(matrix.values):
            for j, value in enumerate(row):
                text = "—" if value is None else f"{value:+.2f}\nn={matrix.counts[i][j]}"
                ax.text(j, i, text, ha="center", va="center", fontsize=8)
        ax.set_xlabel(matrix.col_name)
        ax.set_ylabel(matrix.row_name)
    ax.set_title(title)
    return _save(fig, path)


def seed_stats_figure(stats: list[dict[str, Any]], path: Path) -> bytes:
    """Mean improvement ± standard error per configuration, with each seed's value as a dot."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(stats) + 2), 3.6))
    if not stats:
        _empty(ax, "no completed cells")
    for i, s in enumerate(stats):
        ax.bar(i, s["mean"], yerr=s["se"] or 0.0, capsize=4, color="#4c72b0", alpha=0.8)
        for value in s["values"]:
            ax.plot(i, value, "o", color="#222", markersize=3)
    if stats:
        ax.set_xticks(
            range(len(stats)), [s["label"] for s in stats], rotation=20, ha="right", fontsize=8
        )
        ax.axhline(0, color="#888", linewidth=0.8)
        ax.set_ylabel("improvement (best − baseline)")
    ax.set_title("improvement over seeds: mean ± standard error")
    return _save(fig, path)


def pass_at_k_figure(stats: list[dict[str, Any]], path: Path) -> bytes:
    """Expected best improvement over k runs, per configuration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    if not stats:
        _empty(ax, "no completed cells")
    for s in stats:
        ks = sorted(s["pass_at_k"])
        ax.plot(ks, [s["pass_at_k"][k] for k in ks], "o-", label=s["label"])
    if stats:
        ax.set_xlabel("k (runs drawn from the seeds)")
        ax.set_ylabel("expected best improvement")
        ax.set_xticks(sorted({k for s in stats for k in s["pass_at_k"]}))
        ax.legend(fontsize=7)
    ax.set_title("pass@k: expected best improvement over k runs")
    return _save(fig, path)


def scaling_figure(
    series: dict[str, list[tuple[float, float]]],
    labels: dict[str, str],
    xlabel: str,
    title: str,
    path: Path,
    *,
    note: str | None = None,
    integer_x: bool = False,
) -> bytes:
    """Best-so-far improvement (step curve) of each cell against an x axis.

    Args:
        series: ``{cell_id: [(x, improvement), ...]}``.
        labels: ``{cell_id: configuration}``; cells of one configuration (its seeds) share a colour
            and one legend entry.
        xlabel: The x axis label.
        title: The figure title.
        path: Where the PNG goes.
        note: A small note in the corner.
        integer_x: Integer ticks on the x axis (submission index).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    colours: dict[str, Any] = {}
    for cell_id, points in sorted(series.items()):
        if not points:
            continue
        label = labels.get(cell_id, cell_id)
        xs, ys = zip(*sorted(points), strict=True)
        first = label not in colours
        colours.setdefault(label, f"C{len(colours) % 10}")
        ax.step(
            xs,
            ys,
            where="post",
            marker="o",
            markersize=3,
            color=colours[label],
            alpha=0.85,
            label=label if first else None,
        )
    if not colours:
        _empty(ax, "no valid submission in any completed cell")
    else:
        ax.axhline(0, color="#888", linewidth=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("best-so-far improvement")
        ax.legend(fontsize=7)
        if integer_x:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if note:
        ax.text(0.01, 0.01, note, transform=ax.transAxes, fontsize=7, color="#666", va="bottom")
    ax.set_title(title)
    return _save(fig, path)


def trajectories_figure(tasks: dict[str, list[dict[str, Any]]], path: Path) -> bytes:
    """Score of every submission per cell (one panel per task), baseline dashed."""
    plt = _pyplot()
    names = sorted(tasks) or ["(none)"]
    fig, axes = plt.subplots(1, len(names), figsize=(4.8 * len(names), 3.6), squeeze=False)
    for ax, task in zip(axes[0], names, strict=True):
        cells = tasks.get(task, [])
        drawn = False
        for cell in cells:
            points = [(i + 1, s) for i, s in enumerate(cell["scores"]) if s is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                line = ax.plot(xs, ys, "o-", label=cell["label"])[0]
                drawn = True
                if cell["baseline"] is not None:
                    ax.axhline(
                        cell["baseline"], color=line.get_color(), linestyle="--", linewidth=0.8
                    )
            invalid = [i + 1 for i, s in enumerate(cell["scores"]) if s is None]
            if invalid:
                ax.plot(invalid, [cell["baseline"] or 0.0] * len(invalid), "x", color="#c44")
        if drawn:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("submission")
            ax.set_ylabel("score")
            if len(cells) <= 12:
                ax.legend(fontsize=7)
        else:
            _empty(ax, "no valid submission")
        ax.set_title(f"score trajectories: {task}")
    return _save(fig, path)
