"""Plotly figures and bokeh models, saved so that they come back with the same JSON.

plotly's own ``__reduce__`` rebuilds a figure with ``Figure(fig.to_dict())``: through the
validating constructors, which set each property in the constructor's fixed order. A figure's
template (loaded from plotly's JSON file without validation) then comes back with its keys in
another order, so ``fig.to_json()`` differs from the paused kernel's (``plotly.io.from_json``
and ``Figure(dict)`` reorder the same way). A plotly object is saved here by its attributes
instead, as pickle saves any object without a reduction of its own: the dictionaries that
*are* its JSON come back as they were, validators and parents included.

A bokeh model is made the way bokeh's own deserialiser makes one (``cls.__new__(cls, id=...)``,
so making it draws no new id), with its attributes; and bokeh's counter of ids is moved on to
where the paused kernel's was, so models the next cell creates get the ids they would have
got there (and none collides with a restored one).
"""

from __future__ import annotations

import copyreg
import sys
from typing import Any, Callable

#: plotly's widget figure holds a live front-end connection: left to plotly's own reduction.
_PLOTLY_WIDGET = "plotly.basewidget.BaseFigureWidget"


def _names(kind: type) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in kind.__mro__}


def reduce_plotly(obj: Any) -> Any:
    """A plotly figure or graph object by its attributes (``copyreg.__newobj__`` and its dict)."""
    if _PLOTLY_WIDGET in _names(type(obj)):
        return NotImplemented
    return (copyreg.__newobj__, (type(obj),), dict(vars(obj)))


def make_bokeh_model(kind: type, ident: str, counter: int | None) -> Any:
    """A bokeh model skeleton with its id (its properties come with its state); bokeh's id
    counter moved on to ``counter`` when it is behind."""
    serialization = sys.modules.get("bokeh.util.serialization")
    if counter is not None and serialization is not None:
        with serialization._simple_id_lock:
            serialization._simple_id = max(serialization._simple_id, counter)
    return kind.__new__(kind, id=ident)


def reduce_bokeh_model(model: Any) -> Any:
    """A bokeh model: its class and id, the id counter of this process, and its attributes."""
    serialization = sys.modules.get("bokeh.util.serialization")
    counter = getattr(serialization, "_simple_id", None)
    state = model.__reduce_ex__(2)[2]
    return (make_bokeh_model, (type(model), model.id, counter if isinstance(counter, int) else None), state)


#: Reducers by the qualified name of the class they handle (and its subclasses).
BY_NAME: dict[str, Callable[[Any], Any]] = {
    "plotly.basedatatypes.BaseFigure": reduce_plotly,
    "plotly.basedatatypes.BasePlotlyType": reduce_plotly,
    "bokeh.model.model.Model": reduce_bokeh_model,
}
