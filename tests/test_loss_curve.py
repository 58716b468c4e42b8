"""loss_curve.png: the run's name, both panels' axes labelled, the series named, the size it is drawn at."""

from PIL import Image

from rpbench.training.progress import CURVE_DPI, CURVE_SIZE_INCHES, loss_figure, plot_loss_curve

POINTS = [
    {"step": 0, "held_out_loss": 8.0},
    {"step": 5, "loss": 7.0, "lr": 1e-3},
    {"step": 10, "loss": 5.0, "lr": 5e-4},
    {"step": 10, "held_out_loss": 6.0},
]


def test_the_curve_names_the_run_and_labels_its_axes():
    fig = loss_figure(POINTS, "sft-tiny-qwen2-sample")
    loss_ax, lr_ax = fig.axes
    assert fig.get_suptitle() == "sft-tiny-qwen2-sample: training"
    assert (loss_ax.get_xlabel(), loss_ax.get_ylabel()) == ("optimizer step", "loss")
    assert (lr_ax.get_xlabel(), lr_ax.get_ylabel()) == ("optimizer step", "learning rate")
    assert [t.get_text() for t in loss_ax.get_legend().get_texts()] == ["train loss", "held-out loss"]
    train, held_out = loss_ax.get_lines()
    assert (train.get_xdata().tolist(), held_out.get_ydata().tolist()) == ([5, 10], [8.0, 6.0])


def test_the_png_is_of_the_drawn_size_and_nothing_is_drawn_without_a_point(tmp_path):
    path = plot_loss_curve(POINTS, "run", tmp_path / "loss_curve.png")
    with Image.open(path) as image:
        assert image.size == (round(CURVE_SIZE_INCHES[0] * CURVE_DPI), round(CURVE_SIZE_INCHES[1] * CURVE_DPI))
    assert plot_loss_curve([{"step": 3}], "run", tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
