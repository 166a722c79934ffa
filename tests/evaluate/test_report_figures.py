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
