"""Figures sized for the page that shows them (memlab.report.plotting, memlab.report.book.size_figures).

The book shows a figure at its physical size (96 CSS px per inch), never wider than the article
column (about 670 px at a 1280 px window, 340 px on a 390 px phone); the text of a PNG saved at
``dpi`` and ``natural`` px wide, shown ``shown`` px wide, is ``pt * dpi / 72 * shown / natural`` px.
"""
from __future__ import annotations

import numpy as np
import pytest

from memlab.report import plotting


def _saved(tmp_path, monkeypatch, size: str, name: str, **kwargs):
    """A figure of ``size`` drawn the way the chapters draw (legend asked small, a 7 pt note), saved."""
    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(tmp_path))
    ncols = 2 if size in ("wide", "tall") else 1
    fig, axes = plotting.figure(size, ncols=ncols, **kwargs)
    x = np.linspace(0, 1, 40)
    for ax in np.atleast_1d(axes).ravel():
        for k in range(3):
            ax.plot(x, x * (k + 1) / 3, label=f"method {k}")
        ax.legend(loc="upper left", fontsize=7)
        ax.annotate("a note", (0.6, 0.1), fontsize=7)
        ax.set_xlabel("steps")
        ax.set_ylabel("accuracy (%)")
        ax.set_title("a panel")
    return fig, plotting.savefig(fig, name, "fake")


@pytest.mark.parametrize("size", list(plotting.SIZES))
def test_every_size_is_legible_in_the_column(size, tmp_path, monkeypatch):
    """At the 670 px column every text of a saved figure shows at >= 9 px; no figure needs to scroll
    there; the one-panel sizes also fit a phone's 340 px column with their text >= 9 px."""
    fig, png = _saved(tmp_path, monkeypatch, size, size)
    rc = plotting.plt.rcParams
    style_min = min(rc["xtick.labelsize"], rc["ytick.labelsize"], rc["legend.fontsize"])  # the style's smallest
    artists_min = plotting.smallest_font_pt(fig)  # what the saved figure draws (7 pt asked: raised)
    info = plotting.png_text_info(png)
    assert style_min >= plotting.MIN_FONT_PT and artists_min >= plotting.MIN_FONT_PT
    assert info["font_pt"] == pytest.approx(artists_min) and info["dpi"] == rc["savefig.dpi"]
    natural = info["width"]  # the PNG's own width in px (bbox tight: not exactly figsize * dpi)
    shown = min(plotting.true_width_css(natural, info["dpi"]), plotting.COLUMN_PX)
    px = plotting.displayed_text_px(min(style_min, artists_min), info["dpi"], natural, shown)
    assert px >= plotting.MIN_DISPLAY_PX, f"{size}: {px:.1f} px at {shown:.0f} px shown of {natural} px"
    least = plotting.legible_width_css(natural, info["dpi"], info["font_pt"])
    assert least <= plotting.COLUMN_PX, f"{size} would scroll in the 1280 px window's column ({least} px)"
    assert plotting.displayed_text_px(info["font_pt"], info["dpi"], natural, least) >= plotting.MIN_DISPLAY_PX
    if size in ("single", "square"):
        assert least <= plotting.PHONE_COLUMN_PX, f"{size} needs {least} px on a phone"


def test_a_legend_covering_data_moves_off_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    fig, axes = plotting.figure("wide", ncols=2, sharey=True)
    for ax in axes:
        for k in range(4):
            ax.scatter(rng.random(100), rng.random(100), s=8, label=f"method {k}")
        ax.legend(loc="lower right")  # over the points wherever it goes inside the panel
    plotting.savefig(fig, "covered", "fake")
    assert all(ax.get_legend() is None for ax in axes) and len(fig.legends) == 1
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == [f"method {k}" for k in range(4)]
    box = legend.get_window_extent(fig.canvas.get_renderer())
    assert all(not box.overlaps(ax.get_window_extent()) for ax in axes)
    assert box.width <= fig.bbox.width


def test_a_legend_clear_of_the_data_stays(tmp_path, monkeypatch):
    fig, _ = _saved(tmp_path, monkeypatch, "single", "clear")
    (ax,) = fig.axes
    assert ax.get_legend() is not None and not fig.legends


def test_png_text_info_reads_what_savefig_wrote(tmp_path, monkeypatch):
    _, png = _saved(tmp_path, monkeypatch, "single", "info")
    info = plotting.png_text_info(png)
    assert set(info) == {"width", "height", "font_pt", "dpi"} and info["width"] > 600
    plain = tmp_path / "plain.png"
    plotting.plt.imsave(plain, np.zeros((4, 5)))
    assert plotting.png_text_info(plain) == {"width": 5, "height": 4}
    with pytest.raises(ValueError, match="not a PNG"):
        plotting.png_text_info(tmp_path / "figures" / "fake" / "info.svg")


def test_book_gives_each_figure_its_legible_width(tmp_path, monkeypatch):
    from memlab.report import book

    _, png = _saved(tmp_path, monkeypatch, "wide", "wide")
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "w.png").write_bytes(png.read_bytes())
    plotting.plt.imsave(tmp_path / "_images" / "plain.png", np.zeros((4, 5)))
    page = tmp_path / "page.html"
    page.write_text('<figure class="align-default"><img alt="a" src="_images/w.png" style="width: 100%;" />'
                    '<figcaption>c</figcaption></figure><p><img src="_images/plain.png" /></p>')
    assert book.size_figures(page) is True
    html = page.read_text()
    info = plotting.png_text_info(png)
    least = plotting.legible_width_css(info["width"], info["dpi"], info["font_pt"])
    assert f"--memlab-fig-min: {least}px" in html and "memlab-fig-scroll" in html and "memlab-fig-cue" in html
    assert f'data-memlab-font-pt="{info["font_pt"]:g}"' in html and "width: 100%" not in html
    assert '<p><img src="_images/plain.png" /></p>' in html  # not one of the book's figures: untouched
    assert book.size_figures(page) is False  # once only


def test_prose_dataframes_become_cards_and_numbers_stay_tables(tmp_path):
    import pandas as pd

    from memlab.report import book, tables

    long = "a sentence of prose that is much longer than sixty characters, as a regime's text is"
    prose = pd.DataFrame({"What the paper tested": [long], "Holds": ["no"]}, index=pd.Index(["trained"], name="Regime"))
    numbers = pd.DataFrame({"Pre-F": [1.0], "Post-F": [2.0]}, index=["GA"])
    page = tmp_path / "page.html"
    page.write_text(tables.to_html(prose) + tables.to_html(numbers))
    assert book.wrap_prose_tables(page) is True
    html = page.read_text()
    assert html.count("memlab-prose") == 1 and long in html
    assert 'data-label="What the paper tested"' in html and 'data-label="Holds"' in html
    assert 'data-label="Pre-F"' not in html
    assert book.wrap_prose_tables(page) is False


def test_chapter6_hypotheses_render_as_cards_with_their_full_text():
    from memlab.experiments import ch06_cross_lens as ch

    table = ch.hypotheses_table()
    html = table._repr_html_()
    assert 'class="memlab-cards memlab-hypotheses"' in html and "white-space" not in html
    for n, (key, h) in enumerate(ch.hypotheses().items(), start=1):
        assert f"<strong>{n}. {ch.short_titles()[key]}" in html.replace("&#x27;", "'")
        assert f"`{key}`" not in html and f">{key}<" not in html
    for label in ("Question", "Predicted", "Direction"):
        assert html.count(f'data-label="{label}"') == len(table)
    assert len(repr(table).splitlines()) == len(table)


def test_render_redraws_sweep_figures_in_the_book_style(tmp_path):
    import shutil

    from pathlib import Path

    from memlab.report import book

    src = sorted((Path(__file__).resolve().parents[1] / "book" / "robustness").glob("*.png"))
    if not src:
        pytest.skip("no published sweep figure")
    (tmp_path / "robustness").mkdir()
    for f in (src[0], src[0].with_suffix(".json")):
        shutil.copy(f, tmp_path / "robustness" / f.name)
    (tmp_path / "robustness" / "orphan.png").write_bytes(src[0].read_bytes())  # no summary: left alone
    assert book.redraw_sweep_figures(tmp_path) == [tmp_path / "robustness" / src[0].name]
    info = plotting.png_text_info(tmp_path / "robustness" / src[0].name)
    assert info["font_pt"] >= plotting.MIN_FONT_PT
    assert plotting.legible_width_css(info["width"], info["dpi"], info["font_pt"]) <= plotting.COLUMN_PX
