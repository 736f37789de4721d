"""Reference pages generated from the code itself, so they cannot drift from it.

- ``magics-reference``: each magic's docstring and options, as ``%checkpoint?`` shows them;
- ``cli-reference``: ``jupyter pause`` and each of its commands, as ``--help`` shows them, and
  the Hub service's ``jupyter-pause-hub --help``;
- ``config-reference``: every configurable trait of a class (``c.PauseServer...``): name, type,
  default and help;
- ``layers-table``: the package's layers, from ``jupyter_pause.layers`` (who may import whom).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive


def _literal(text: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = "text"
    return block


def _section(title: str, ident: str, *children: nodes.Node) -> nodes.section:
    section = nodes.section(ids=[nodes.make_id(ident)])
    section += nodes.title(title, title)
    for child in children:
        section += child
    return section


class MagicsReference(Directive):
    """The magics of ``jupyter_pause.kernel.magics.PauseMagics``, one section each."""

    def run(self) -> list[nodes.Node]:
        from jupyter_pause.kernel.magics import PauseMagics

        found = []
        for name in ("checkpoint", "resume"):
            doc = getattr(PauseMagics, name).__doc__.replace("::\n\n", "", 1)
            found.append(_section(f"%{name}", f"magic-{name}", _literal(_dedent(doc))))
        return found


def _dedent(text: str) -> str:
    import textwrap

    return textwrap.dedent(text).strip("\n")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class CliReference(Directive):
    """``jupyter pause --help`` and each command's, then ``jupyter-pause-hub --help``."""

    def run(self) -> list[nodes.Node]:
        from jupyter_pause.cli.main import parser
        from jupyter_pause.hub.options import parser as hub_parser

        top = parser()
        found = [_section("jupyter pause", "cli-top", _literal(top.format_help()))]
        for name, sub in _subparsers(top).items():
            found.append(_section(f"jupyter pause {name}", f"cli-{name}", _literal(sub.format_help())))
        found.append(_section("jupyter-pause-hub", "cli-hub", _literal(hub_parser({}).format_help())))
        return found


class ConfigReference(Directive):
    """Every configurable trait of the class named in the argument (``module:Class``)."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        module, _, name = self.arguments[0].partition(":")
        cls: Any = getattr(importlib.import_module(module), name)
        items = nodes.definition_list()
        for trait_name, trait in sorted(cls.class_traits(config=True).items()):
            default = trait.default_value_repr()
            term = nodes.term()
            term += nodes.literal(f"c.{name}.{trait_name}", f"c.{name}.{trait_name}")
            term += nodes.Text(f"  ({type(trait).__name__}, default {default})")
            body = nodes.definition()
            body += nodes.paragraph(text=" ".join((trait.help or "").split()))
            item = nodes.definition_list_item()
            item += term
            item += body
            items += item
        return [items]


class LayersTable(Directive):
    """``jupyter_pause.layers.ALLOWED`` as a table: each part and what it may import."""

    def run(self) -> list[nodes.Node]:
        from jupyter_pause.layers import ALLOWED

        table = nodes.table()
        group = nodes.tgroup(cols=2)
        table += group
        for width in (20, 80):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        body = nodes.tbody()
        group += body
        head += self._row("part", "may import")
        for part, allowed in ALLOWED.items():
            body += self._row(part, ", ".join(sorted(allowed)) or "-")
        return [table]

    @staticmethod
    def _row(*cells: str) -> nodes.row:
        row = nodes.row()
        for text in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text=text)
            row += entry
        return row


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("magics-reference", MagicsReference)
    app.add_directive("cli-reference", CliReference)
    app.add_directive("config-reference", ConfigReference)
    app.add_directive("layers-table", LayersTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
