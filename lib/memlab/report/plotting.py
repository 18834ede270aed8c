"""One figure style for the whole book; figures saved as PNG and SVG.

``publish(fig, name, chapter)`` saves the figure under
``<book>/figures/<chapter>/<name>.{png,svg}`` and glues the saved PNG (myst-nb)
under the key ``<chapter>-<name>`` so a ``{glue:figure}`` markdown cell shows it
numbered and captioned. The glued output is an ``image/png`` bundle, not the
matplotlib object: myst-nb records a Figure under the Agg backend only as the
text ``<Figure size ...>``, which is what a reader would then see.

Figures are sized for the page that shows them. The book's article column is about
:data:`COLUMN_PX` CSS px wide at a 1280 px window and :data:`PHONE_COLUMN_PX` on a 390 px
phone; the book shows a figure at its physical size (:data:`CSS_PX_PER_IN` CSS px per inch,
:func:`true_width_css`) and never wider than the column, so a figure's smallest text, at
least :data:`MIN_FONT_PT`, shows at :func:`displayed_text_px`. Every figure of
:func:`figure` saves through :class:`BookFigure`, which before saving raises any smaller
text to :data:`MIN_FONT_PT`, moves a legend that covers data off the data (first to
matplotlib's "best" place, else below the panels), and writes into the PNG the size of its
smallest text (:data:`PNG_FONT_KEY`, read by :func:`png_text_info`): the book
(``memlab.report.book.size_figures``) gives each image a minimum width at which that text is
:data:`MIN_DISPLAY_PX` px, and a figure that needs more than a phone's column scrolls
sideways in its own box, with a cue (``book/_static/memlab.css``).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files first; notebooks show them through glue
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.collections import Collection, LineCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from memlab.core.results import output_dir  # noqa: E402

# Widths (inches) for the page: "wide" and "tall" (several panels) fill the 1280 px column at their
# physical size (6.8 in = 653 CSS px); "single" and "square" fit a phone's column without scrolling.
SIZES = {"single": (4.5, 3.2), "wide": (6.8, 3.0), "square": (4.4, 4.4), "tall": (6.8, 5.6)}
PALETTE = "colorblind"
DPI = 150               # savefig.dpi: PNG pixels per inch
MIN_FONT_PT = 9.0       # no text of a saved figure is smaller (ticks and legends are this size)
MIN_DISPLAY_PX = 9.0    # the smallest text a reader is shown, in CSS px
CSS_PX_PER_IN = 96      # a CSS inch: the size the book shows a figure at, column permitting
COLUMN_PX = 670         # the article column at a 1280 px window (Jupyter Book's theme)
PHONE_COLUMN_PX = 340   # the article column on a 390 px phone
PNG_FONT_KEY = "memlab-min-font-pt"  # PNG text chunk: the smallest font size in the figure (pt)
PNG_DPI_KEY = "memlab-dpi"           # PNG text chunk: the dpi it was saved at


def use_style() -> None:
    """Apply the book's style (seaborn whitegrid, colour-blind palette, fixed fonts)."""
    sns.set_theme(context="paper", style="whitegrid", palette=PALETTE, font_scale=1.1)
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": DPI, "savefig.bbox": "tight", "font.size": 10, "axes.titlesize": 11,
        "axes.labelsize": 10, "xtick.labelsize": MIN_FONT_PT, "ytick.labelsize": MIN_FONT_PT,
        "legend.fontsize": MIN_FONT_PT, "legend.title_fontsize": 10, "figure.titlesize": 11,
        "legend.frameon": False, "svg.hashsalt": "memlab", "svg.fonttype": "none",
    })


def displayed_text_px(pt: float, dpi: float, natural_px: float, displayed_px: float) -> float:
    """CSS px of ``pt``-point text in a PNG saved at ``dpi``, ``natural_px`` wide, shown ``displayed_px`` wide."""
    return pt * dpi / 72 * displayed_px / natural_px


def true_width_css(natural_px: float, dpi: float) -> float:
    """The CSS width at which a PNG shows at its physical size (its inches at :data:`CSS_PX_PER_IN`)."""
    return natural_px * CSS_PX_PER_IN / dpi


def legible_width_css(natural_px: float, dpi: float, pt: float) -> int:
    """The least CSS width at which ``pt``-point text of the PNG shows at :data:`MIN_DISPLAY_PX` px."""
    return math.ceil(MIN_DISPLAY_PX * natural_px * 72 / (pt * dpi) - 1e-9)


def png_text_info(path) -> dict:
    """{"width", "height"} (px) of a PNG and, when :class:`BookFigure` saved it, "font_pt" and "dpi"."""
    import struct

    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    info: dict = {}
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            info["width"], info["height"] = struct.unpack(">II", body[:8])
        elif kind == b"tEXt" and b"\0" in body:
            key, value = body.split(b"\0", 1)
            if key.decode("latin-1") == PNG_FONT_KEY:
                info["font_pt"] = float(value)
            elif key.decode("latin-1") == PNG_DPI_KEY:
                info["dpi"] = float(value)
        elif kind == b"IEND":
            break
        pos += 12 + length
    return info


def _visible_texts(artist):
    """The non-empty Text artists that are drawn (every ancestor visible)."""
    if not artist.get_visible():
        return
    if isinstance(artist, Text) and artist.get_text().strip():
        yield artist
    for child in artist.get_children():
        yield from _visible_texts(child)


def smallest_font_pt(fig) -> float:
    """The smallest font size (pt) of the text a figure draws (:data:`MIN_FONT_PT` if it draws none)."""
    sizes = [t.get_fontsize() for t in _visible_texts(fig)]
    return float(min(sizes)) if sizes else MIN_FONT_PT


def _raise_small_text(fig) -> None:
    """No text of ``fig`` below :data:`MIN_FONT_PT`: tick labels (also those made later), legends, notes."""
    for ax in fig.axes:
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = axis.get_ticklabels(which="both")
            if any(t.get_fontsize() < MIN_FONT_PT for t in labels):
                ax.tick_params(axis=name, which="both", labelsize=MIN_FONT_PT)
    for t in fig.findobj(Text):
        if t.get_fontsize() < MIN_FONT_PT:
            t.set_fontsize(MIN_FONT_PT)


def _data_overlap(ax, bbox, renderer) -> bool:
    """Whether the display-space ``bbox`` covers any of the axes' data (lines, markers, bars, bands)."""
    bbox = bbox.padded(-2)  # touching the edge is not covering
    for artist in ax.get_children():
        if not artist.get_visible():
            continue
        if isinstance(artist, Line2D):
            path = artist.get_transform().transform_path(artist.get_path())
            if artist.get_linestyle() not in ("None", "none", "", " ") and path.intersects_bbox(bbox, filled=False):
                return True
            if artist.get_marker() not in (None, "None", "none", "", " ") and bbox.count_contains(path.vertices):
                return True
        elif isinstance(artist, Rectangle) and artist is not ax.patch:
            if artist.get_bbox().transformed(artist.get_data_transform()).overlaps(bbox):
                return True
        elif isinstance(artist, Patch) and artist is not ax.patch and artist not in ax.spines.values():
            if artist.get_transform().transform_path(artist.get_path()).intersects_bbox(bbox, filled=True):
                return True
        elif isinstance(artist, (PolyCollection, LineCollection)):
            filled = isinstance(artist, PolyCollection)
            trans = artist.get_transform()
            if any(trans.transform_path(p).intersects_bbox(bbox, filled=filled) for p in artist.get_paths()):
                return True
        elif isinstance(artist, Collection):
            offsets = artist.get_offsets()
            if len(offsets) and bbox.count_contains(artist.get_offset_transform().transform(offsets)):
                return True
    return False


def _covering_legends(fig, renderer) -> list:
    return [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None and ax.get_legend().get_visible()
            and _data_overlap(ax, ax.get_legend().get_window_extent(renderer), renderer)]


def _legends_off_the_data(fig) -> None:
    """Move each axes legend that covers data: to matplotlib's "best" place, else under the panels."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    covering = _covering_legends(fig, renderer)
    if not covering:
        return
    for _, leg in covering:
        leg.set_loc("best")
    fig.draw_without_rendering()
    covering = _covering_legends(fig, renderer)
    if not covering or not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return  # an "outside" figure legend needs constrained layout (figure() has it)
    handles, labels, title = [], [], None
    for ax, leg in covering:
        originals = dict(zip(*reversed(ax.get_legend_handles_labels())))
        for proxy, text in zip(leg.legend_handles, leg.get_texts()):
            label = text.get_text()
            if label not in labels:
                handles.append(originals.get(label, proxy))
                labels.append(label)
        title = title or leg.get_title().get_text() or None
        leg.remove()
    taken = {getattr(lg, "_outside_loc", None) for lg in fig.legends}
    loc = "outside lower center" if "lower" not in taken else "outside right upper"
    for ncols in range(len(labels), 0, -1):  # as many columns as the figure's width holds
        new = fig.legend(handles, labels, loc=loc, ncols=ncols, title=title, fontsize=MIN_FONT_PT)
        fig.draw_without_rendering()
        if ncols == 1 or new.get_window_extent(renderer).width <= fig.bbox.width:
            break
        new.remove()


class BookFigure(Figure):
    """A Figure that, when saved, is ready for the page (see the module docstring).

    Before every save: text below :data:`MIN_FONT_PT` is raised to it and a legend covering data
    is moved off it; a PNG carries its smallest font size and dpi as text chunks.
    """

    def savefig(self, fname, *args, **kwargs):
        _raise_small_text(self)
        if any(ax.get_legend() is not None for ax in self.axes):
            _legends_off_the_data(self)
        fmt = kwargs.get("format") or (Path(fname).suffix.lstrip(".") if isinstance(fname, (str, Path)) else "")
        if str(fmt or plt.rcParams["savefig.format"]).lower() == "png":
            dpi = kwargs.get("dpi") or plt.rcParams["savefig.dpi"]
            dpi = self.dpi if dpi == "figure" else float(dpi)
            self.draw_without_rendering()
            kwargs["metadata"] = {**(kwargs.get("metadata") or {}), PNG_FONT_KEY: f"{smallest_font_pt(self):.2f}",
                                  PNG_DPI_KEY: f"{dpi:g}"}
        return super().savefig(fname, *args, **kwargs)


def figure(size: str = "single", ncols: int = 1, nrows: int = 1, **kwargs):
    """A new (fig, axes) of one of the fixed sizes: single, wide, square, tall."""
    if size not in SIZES:
        raise ValueError(f"parameter 'size': must be one of {', '.join(SIZES)} (got {size!r})")
    use_style()
    return plt.subplots(nrows, ncols, figsize=SIZES[size], constrained_layout=True, FigureClass=BookFigure,
                        **kwargs)


def figure_dir(chapter: str) -> Path:
    path = output_dir() / "figures" / chapter
    path.mkdir(parents=True, exist_ok=True)
    return path


def savefig(fig, name: str, chapter: str) -> Path:
    """Write ``<name>.png`` and ``<name>.svg`` for ``chapter``; returns the PNG path."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"parameter 'name': must be a plain file stem (got {name!r})")
    folder = figure_dir(chapter)
    png = folder / f"{name}.png"
    fig.savefig(png, metadata={"Software": None})
    fig.savefig(folder / f"{name}.svg", metadata={"Date": None})
    return png


def published_figures(chapter: str) -> list[str]:
    """Names of the figures this process has published for ``chapter``, in order."""
    return list(_PUBLISHED.get(chapter, []))


_PUBLISHED: dict[str, list[str]] = {}


def publish(fig, name: str, chapter: str) -> None:
    """Save the figure and glue its PNG under ``<chapter>-<name>`` for a ``{glue:figure}`` cell.

    Returns None so that a bare ``publish(...)`` as a cell's last line shows nothing;
    the files are at ``figure_dir(chapter) / f"{name}.png"`` (and ``.svg``).
    """
    png = savefig(fig, name, chapter)
    names = _PUBLISHED.setdefault(chapter, [])
    if name not in names:
        names.append(name)
    try:
        from IPython.display import Image
        from myst_nb import glue

        glue(f"{chapter}-{name}", Image(filename=str(png)), display=False)
    except ImportError:  # outside a notebook toolchain the files are what matters
        pass
    plt.close(fig)
