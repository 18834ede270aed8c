"""A Sphinx extension: bibliography labels in the author-year style of the in-text citations.

sphinxcontrib-bibtex cites author-year in the text ("[He et al., 2016]") but labels the
bibliography with pybtex's alpha style ("[HZRS16]") unless told otherwise; a reader cannot
match the two. This registers the pybtex style ``memlab_authoryear`` (unsrt entries, sorted by
author, year and title, labelled "He et al., 2016"; "a"/"b" suffixes keep labels unique) and
makes it the default ("Chen and others" stays as written: the in-text citation says the
same). ``_config.yml`` loads it through ``sphinx.extra_extensions``.
"""
from __future__ import annotations

from collections import Counter

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as _Unsrt
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle

NAME = "memlab_authoryear"


def _surname(person) -> str:
    parts = person.prelast_names + person.last_names or person.first_names
    return " ".join(parts).replace("{", "").replace("}", "")


def author_year(entry) -> str:
    """``Surname, 2016`` / ``A and B, 2016`` / ``A et al., 2016`` for one pybtex entry."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_surname(p) for p in persons]
    if not names:
        who = entry.fields.get("title", entry.key).replace("{", "").replace("}", "")[:30]
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:  # "Li et al., 2026a", "Li et al., 2026b"
                seen[label] += 1
                label = f"{label}{'abcdefghijklmnopqrstuvwxyz'[seen[label] - 1]}"
            yield label


class AuthorYearSort(BaseSortingStyle):
    """In the order a reader looks entries up: by label (author, year), then title."""

    def sorting_key(self, entry):
        return author_year(entry).lower(), entry.fields.get("title", "").lower()


class AuthorYearStyle(_Unsrt):
    default_label_style = NAME
    default_sorting_style = NAME


register_plugin("pybtex.style.labels", NAME, AuthorYearLabels)
register_plugin("pybtex.style.sorting", NAME, AuthorYearSort)
register_plugin("pybtex.style.formatting", NAME, AuthorYearStyle)


def setup(app):
    app.config.bibtex_default_style = NAME
    return {"parallel_read_safe": True, "parallel_write_safe": True}
