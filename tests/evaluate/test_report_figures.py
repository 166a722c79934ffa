"""The per-task heatmap keeps long arm names apart and its colour-bar label inside the picture."""

import itertools
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pdbgym.evaluate.report import heatmap_figure  # noqa: E402

ARMS = ["scripted-oracle", "smollm2-135m-base", "smollm2-135m-sft-lora-r16", "served-model"]


def _summary() -> dict:
    tasks = [f"builtin__task-{i}-with-a-long-name" for i in range(6)]
    return {"arms": ARMS, "per_task": {t: {a: (i + j) % 3 / 2 for j, a in enumerate(ARMS)}
                                       for i, t in enumerate(tasks)}}


def test_arm_labels_do_not_overlap_and_colour_bar_label_is_inside():
    fig = heatmap_figure(plt, _summary())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    heat = fig.axes[0]
    labels = heat.get_xticklabels()
    boxes = [label.get_window_extent(renderer) for label in labels]
    assert [label.get_text() for label in labels] == ARMS
    angle = math.radians(labels[0].get_rotation())
    if angle == 0:
        for a, b in itertools.combinations(boxes, 2):
            assert not a.overlaps(b), "arm labels overlap"
    else:  # parallel slanted lines of text: apart when their perpendicular spacing exceeds a line's height
        line_px = labels[0].get_fontsize() * fig.dpi / 72 * 1.2
        ticks = heat.transData.transform([(x, 0) for x in range(len(ARMS))])[:, 0]
        assert min(ticks[1:] - ticks[:-1]) * math.sin(angle) > line_px, "arm labels overlap"
    colour_bar = fig.axes[1]
    label_box = colour_bar.yaxis.label.get_window_extent(renderer)
    figure_box = fig.bbox
    assert colour_bar.yaxis.label.get_text() == "solve rate"
    assert figure_box.x0 <= label_box.x0 and label_box.x1 <= figure_box.x1, "colour-bar label cut"
    for box in boxes:
        assert figure_box.y0 <= box.y0 and figure_box.x0 <= box.x0, "arm label cut"
    plt.close(fig)


def _pass_summary(ks: list[int]) -> dict:
    """Three arms whose pass@k are identical, so points at one k would coincide without an x offset."""
    block = {f"pass@{k}": {"mean": 0.5, "ci": [0.2, 0.8]} for k in ks}
    return {"arms": ARMS[:3], "arm_results": {a: dict(block) for a in ARMS[:3]}}


def _bars(ax) -> list:
    """The error-bar containers of the pass@k axes, one per arm."""
    from matplotlib.container import ErrorbarContainer

    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_pass_at_k_single_k_draws_each_arms_interval_and_no_arm_hides_another():
    from pdbgym.evaluate.report import pass_at_k_figure

    fig = pass_at_k_figure(plt, _pass_summary([1]))
    ax = fig.axes[0]
    assert ax.get_title() == "pass@k with task-clustered CIs"
    from matplotlib.collections import PolyCollection

    assert not any(isinstance(c, PolyCollection) for c in ax.collections), "no band: it is empty at a single k"
    bars = _bars(ax)
    assert len(bars) == 3, "one error bar per arm"
    xs = []
    for bar in bars:
        line, _caps, (segments,) = bar.lines
        (x,), (y,) = line.get_xdata(), line.get_ydata()
        xs.append(x)
        assert y == 0.5
        (seg,) = segments.get_segments()  # a visible vertical interval from 0.2 to 0.8 at the point
        assert sorted(seg[:, 1].tolist()) == [0.2, 0.8]
        assert seg[0, 0] == seg[1, 0] == x
    assert len(set(xs)) == 3, "arms drawn at the same x hide each other"
    assert all(abs(x - 1) < 0.5 for x in xs), "offsets stay within the k"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ARMS[:3]
    plt.close(fig)


def test_pass_at_k_several_k_offsets_are_the_same_at_every_k():
    from pdbgym.evaluate.report import arm_offsets, pass_at_k_figure

    fig = pass_at_k_figure(plt, _pass_summary([1, 2, 4]))
    bars = _bars(fig.axes[0])
    for bar, offset in zip(bars, arm_offsets(3), strict=True):
        assert [round(x - k, 9) for x, k in zip(bar.lines[0].get_xdata(), [1, 2, 4], strict=True)] == [offset] * 3
    assert list(fig.axes[0].get_xticks()) == [1, 2, 4]
    plt.close(fig)
    assert arm_offsets(1) == [0.0]
    assert arm_offsets(0) == []


def test_the_comparison_note_promises_a_mark_only_when_a_row_carries_it():
    from pdbgym.evaluate.report import SD0_MARK, comparison_note, comparison_rows

    def comparison(warning: str | None) -> dict:
        return {"arm_a": "sft", "arm_b": "base", "mean_diff": 0.25, "ci": [0.05, 0.45], "se": 0.1,
                "correlation": 0.3, "min_detectable_diff": 0.28, **({"warning": warning} if warning else {})}

    plain = {"comparisons": [comparison(None)]}
    assert SD0_MARK not in comparison_rows(plain)[0][2] and "marked" not in comparison_note(plain)
    fallen = {"comparisons": [comparison(None), comparison("every task differs alike (sd 0)")]}
    rows = comparison_rows(fallen)
    assert [SD0_MARK in row[2] for row in rows] == [False, True]
    assert f"such rows are marked {SD0_MARK} after the mean diff" in comparison_note(fallen)
