"""Figures of chapter 1 (the BN illusion): each takes the experiment's DataFrame and returns a figure."""
from __future__ import annotations

import numpy as np
import pandas as pd

from memlab import plotting

SOURCE_LABELS = {"retain": "retain images", "test": "held-out test images", "ood": "out-of-distribution substitute"}


def fig1a(table: pd.DataFrame):
    """Grouped bars per method: forget accuracy (%) before, after a B-image recovery, after full recalibration."""
    fig, ax = plotting.figure("wide")
    n, k = len(table), len(table.columns)
    width = 0.8 / k
    x = np.arange(n)
    for i, col in enumerate(table.columns):
        ax.bar(x + (i - (k - 1) / 2) * width, table[col].values, width, label=col)
    ax.set_xticks(x, table.index, rotation=30, ha="right")
    ax.set_ylabel("forget-class test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(ncols=k, loc="upper left")
    return fig


def fig1b(sweep: pd.DataFrame, audit_ref: dict[str, float]):
    """Forget accuracy (%) against recovery budget B (log axis), one panel per method, one line per source.

    audit_ref: method -> Post-F (full retain recalibration), drawn dashed.
    """
    methods = list(dict.fromkeys(sweep["method"]))
    fig, axes = plotting.figure("wide", ncols=len(methods), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, m in zip(axes, methods):
        d = sweep[sweep["method"] == m]
        for src, g in d.groupby("source", sort=False):
            s = g.groupby("budget")["forget_acc"].agg(["mean", "std"])
            ax.errorbar(s.index, s["mean"], yerr=s["std"].fillna(0), marker="o", ms=3, capsize=2,
                        label=SOURCE_LABELS.get(src, src))
        ax.axhline(audit_ref[m], ls="--", color="k", lw=1, label="full retain recalibration")
        ax.set_xscale("log")
        budgets = sorted(d["budget"].unique())
        ax.set_xticks(budgets, [str(b) for b in budgets], rotation=45)
        ax.minorticks_off()
        ax.set_title(m)
        ax.set_xlabel("recovery budget B (images)")
    axes[0].set_ylabel("forget-class test accuracy (%)")
    axes[0].set_ylim(0, 100)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    return fig


def fig_sweep(df: pd.DataFrame, xlabel: str, log: bool = False):
    """Pre-F, Post-F (%) against a swept setting (Appendix H and Q)."""
    fig, ax = plotting.figure("single")
    ax.plot(df.index, df["Pre-F"], marker="o", label="Pre-F (published)")
    ax.plot(df.index, df["Post-F"], marker="s", label="Post-F (recalibrated)")
    ax.fill_between(df.index, df["Pre-F"], df["Post-F"], alpha=0.15, label="ΔF")
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("forget-class test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend()
    return fig


def fig2(profile: pd.DataFrame):
    """Per-layer normalised running-mean gap before (solid) and after (dashed) recalibration, per method."""
    fig, ax = plotting.figure("wide")
    for i, (m, g) in enumerate(profile.groupby("method", sort=False)):
        color = f"C{i % 10}"
        ax.plot(g["layer"], g["before"], color=color, marker=".", label=m)
        ax.plot(g["layer"], g["after"], color=color, ls="--", lw=0.8)
    ax.plot([], [], color="k", ls="--", lw=0.8, label="half vs full retain (sampling error)")
    ax.set_yscale("log")
    ax.set_xticks(sorted(profile["layer"].unique()))
    ax.set_xlabel("BN layer (input to output)")
    ax.set_ylabel("mean |μ - μ*| / σ*")
    ax.legend(ncols=2, fontsize=7)
    return fig


def fig_scatter(summary: pd.DataFrame, x: str = "Post-F", ys: tuple[str, ...] = ("ReAUC", "LP-50")):
    """Post-recalibration forget accuracy against ReAUC and LP-50, one point per method."""
    fig, axes = plotting.figure("wide", ncols=len(ys))
    for ax, y in zip(np.atleast_1d(axes), ys):
        ax.scatter(summary[x], summary[y])
        for name, r in summary.iterrows():
            ax.annotate(name, (r[x], r[y]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(f"{x} (%)")
        ax.set_ylabel(y)
    return fig
