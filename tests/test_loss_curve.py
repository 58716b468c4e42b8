"""loss_curve.png: the run's name and sample counts, both panels' axes labelled on whole steps, the series named, the
size it is drawn at."""

from PIL import Image

from rpbench.training.progress import CURVE_DPI, CURVE_SIZE_INCHES, loss_figure, plot_loss_curve

POINTS = [
    {"step": 0, "held_out_loss": 8.0},
    {"step": 5, "loss": 7.0, "lr": 1e-3},
    {"step": 10, "loss": 5.0, "lr": 5e-4},
    {"step": 10, "held_out_loss": 6.0},
]


def test_the_curve_names_the_run_and_its_samples_and_labels_its_axes():
    fig = loss_figure(POINTS, "sft-tiny-qwen2-sample", (40, 8))
    loss_ax, lr_ax = fig.axes
    assert fig.get_suptitle() == "sft-tiny-qwen2-sample: 40 training samples, 8 held out, 10 optimizer steps"
    fig.canvas.draw()
    for ax in (loss_ax, lr_ax):  # optimizer steps are whole numbers: no tick at 2.5
        assert all(tick == int(tick) for tick in ax.get_xticks())
    assert (loss_ax.get_xlabel(), loss_ax.get_ylabel()) == ("optimizer step", "loss")
    assert (lr_ax.get_xlabel(), lr_ax.get_ylabel()) == ("optimizer step", "learning rate")
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["train loss", "held-out loss"]
    train, held_out = loss_ax.get_lines()
    assert (train.get_xdata().tolist(), held_out.get_ydata().tolist()) == ([5, 10], [8.0, 6.0])


def test_a_short_run_s_single_points_are_seen_on_the_steps_of_the_run():
    """debug=short logs one training point (step 3): it is marked, and the learning rate shares the steps' axis."""
    fig = loss_figure([{"step": 0, "held_out_loss": 3.1}, {"step": 3, "loss": 3.0, "lr": 5e-6}], "short", (8, 2))
    loss_ax, lr_ax = fig.axes
    fig.canvas.draw()
    assert all(line.get_marker() == "o" for ax in (loss_ax, lr_ax) for line in ax.get_lines())
    assert lr_ax.get_xlim() == loss_ax.get_xlim() and lr_ax.get_xlim()[0] < 0 < 3 < lr_ax.get_xlim()[1]


def test_the_png_is_of_the_drawn_size_and_nothing_is_drawn_without_a_point(tmp_path):
    path = plot_loss_curve(POINTS, "run", (40, 8), tmp_path / "loss_curve.png")
    with Image.open(path) as image:
        assert image.size == (round(CURVE_SIZE_INCHES[0] * CURVE_DPI), round(CURVE_SIZE_INCHES[1] * CURVE_DPI))
    assert plot_loss_curve([{"step": 3}], "run", (40, 8), tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
