"""One figure style for the whole book; figures saved as PNG and SVG.

``publish(fig, name, chapter)`` saves the figure under
``<book>/figures/<chapter>/<name>.{png,svg}`` and glues the saved PNG (myst-nb)
under the key ``<chapter>-<name>`` so a ``{glue:figure}`` markdown cell shows it
numbered and captioned. The glued output is an ``image/png`` bundle, not the
matplotlib object: myst-nb records a Figure under the Agg backend only as the
text ``<Figure size ...>``, which is what a reader would then see.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files first; notebooks show them through glue
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from memlab.results import output_dir  # noqa: E402

SIZES = {"single": (4.5, 3.2), "wide": (9.0, 3.4), "square": (4.8, 4.8), "tall": (9.0, 6.4)}
PALETTE = "colorblind"


def use_style() -> None:
    """Apply the book's style (seaborn whitegrid, colour-blind palette, fixed fonts)."""
    sns.set_theme(context="paper", style="whitegrid", palette=PALETTE, font_scale=1.1)
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight", "axes.titlesize": 11,
        "axes.labelsize": 10, "legend.fontsize": 8, "legend.frameon": False, "svg.hashsalt": "memlab",
        "svg.fonttype": "none",
    })


def figure(size: str = "single", ncols: int = 1, nrows: int = 1, **kwargs):
    """A new (fig, axes) of one of the fixed sizes: single, wide, square, tall."""
    if size not in SIZES:
        raise ValueError(f"parameter 'size': must be one of {', '.join(SIZES)} (got {size!r})")
    use_style()
    return plt.subplots(nrows, ncols, figsize=SIZES[size], constrained_layout=True, **kwargs)


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
