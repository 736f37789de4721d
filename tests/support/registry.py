"""A registry of object kinds a notebook holds, and how to observe each one for the registry test.

``BATCHES`` holds notebook code, one string per batch: run as a cell (``__name__ == "__main__"``)
in an empty folder, it defines one variable per kind, named ``k_<kind>``. ``observe`` turns a value
into JSON that says what a user would notice about it: the value, a buffer's or file's position
and what reading or writing does next, an iterator's remaining items, a logger's level and
handlers, what a weak reference points at. Observing may consume (iterators, files): it is run on
a second build of the same cell and on the resumed namespace, never on the checkpointed one.
"""

from __future__ import annotations

import enum
import io
import itertools
import json
import logging
import os
import re
import sys
import types
import weakref
from typing import Any

STDLIB = r"""
import array, collections, dataclasses, datetime, decimal, enum, fractions, functools, io, logging
import operator, os, pprint, queue, re, string, sys, tarfile, tempfile, threading, types, uuid
import weakref, zipfile, pathlib, ipaddress, calendar, textwrap, argparse, copy, heapq, bisect
import contextlib, numbers, struct, zoneinfo, itertools, statistics, random, typing, json

with open("in.txt", "w") as f:
    f.write("alpha\nbeta\ngamma\ndelta\n")
with open("appended.txt", "w") as f:
    f.write("old line\n")
with open("member.txt", "w") as f:
    f.write("inside the archive")
os.utime("member.txt", (1e9, 1e9))
with tarfile.open("archive.tar", "w") as t:
    t.add("member.txt")
with zipfile.ZipFile("archive.zip", "w") as z:
    z.write("member.txt")

@dataclasses.dataclass
class Point:
    x: int
    y: int = 0
    tags: list = dataclasses.field(default_factory=list)

@dataclasses.dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int

class Color(enum.Enum):
    RED = 1
    GREEN = 2

class Flags(enum.IntFlag):
    READ = 4
    WRITE = 2

class Slotted:
    __slots__ = ("a", "b")
    def __init__(self, a, b):
        self.a, self.b = a, b

class Plain:
    def __init__(self, v):
        self.v = v
    def double(self):
        return 2 * self.v

class Child(Plain):
    def double(self):
        return 3 * self.v

def make_counter(start):
    count = start
    def step():
        nonlocal count
        count += 1
        return count
    return step

Pair = collections.namedtuple("Pair", "left right")

class Typed(typing.NamedTuple):
    name: str
    size: int = 0

data = {"a": 1, "b": 2, "c": 3, "d": 4}
ordered = collections.OrderedDict([("x", 10), ("y", 20), ("z", 30)])
numbers_ = [5, 6, 7, 8]
letters = {30, 10, 20}  # ints: the same order in every process

k_none, k_true, k_int, k_big_int, k_float, k_nan = None, True, 7, 2**100, 1.5, float("nan")
k_complex, k_str, k_bytes, k_bytearray = 1 - 2j, "text é", b"\x00\xff", bytearray(b"abc")
k_list, k_tuple, k_dict, k_set, k_frozenset = [1, [2]], (1, "a"), {"k": [1]}, {1, 2}, frozenset({3})
k_range, k_slice, k_ellipsis, k_notimpl = range(2, 20, 3), slice(1, 9, 2), ..., NotImplemented
k_memoryview_bytes = bytes(memoryview(b"view"))
k_recursive = [1]; k_recursive.append(k_recursive)
k_object = object()
k_type, k_builtin_fn, k_builtin_method = int, len, [].append
k_exception = ValueError("bad value", 3)
k_ordered, k_data, k_numbers, k_letters = ordered, data, numbers_, letters
k_defaultdict = collections.defaultdict(list, {"a": [1]})
k_counter = collections.Counter("abracadabra")
k_deque = collections.deque([1, 2, 3], maxlen=5)
k_chainmap = collections.ChainMap({"a": 1}, {"b": 2})
k_namedtuple, k_typed_namedtuple = Pair(1, 2), Typed("t", 3)
k_userdict, k_userlist = collections.UserDict(a=1), collections.UserList([1, 2])
k_array = array.array("d", [1.0, 2.5])
k_date, k_time = datetime.date(2024, 2, 29), datetime.time(12, 30, 15)
k_datetime = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
k_timedelta, k_timezone = datetime.timedelta(days=2, seconds=5), datetime.timezone(datetime.timedelta(hours=2))
k_zoneinfo = zoneinfo.ZoneInfo("UTC")
k_decimal, k_fraction = decimal.Decimal("1.10"), fractions.Fraction(3, 7)
k_decimal_context = decimal.Context(prec=5)
k_pattern, k_bytes_pattern = re.compile(r"(\w+)-(\d+)", re.I), re.compile(rb"\d+")
k_uuid, k_path = uuid.UUID(int=12345), pathlib.PurePosixPath("/a/b.txt")
k_ip = ipaddress.ip_network("10.0.0.0/24")
k_partial = functools.partial(int, base=2)
k_itemgetter, k_attrgetter = operator.itemgetter(1, 0), operator.attrgetter("real")
k_methodcaller = operator.methodcaller("split", "-")
k_struct = struct.Struct("<if")
k_template = string.Template("hello $name")
k_calendar = calendar.TextCalendar(firstweekday=6)
k_wrapper = textwrap.TextWrapper(width=30)
k_argparser = argparse.ArgumentParser(prog="tool"); k_argparser.add_argument("--n", type=int, default=3)
k_namespace = argparse.Namespace(a=1, b="x")
k_simple_namespace = types.SimpleNamespace(a=1, b=[2])
k_mappingproxy = types.MappingProxyType({"ro": 1})
k_queue = queue.Queue(); k_queue.put(1); k_queue.put(2)
k_lock, k_rlock, k_event = threading.Lock(), threading.RLock(), threading.Event()
k_random = random.Random(42)
k_generic_alias = list[int]
k_union_type = int | str
k_point, k_version = Point(1, 2, ["t"]), Version(1, 2)
k_enum, k_flag, k_enum_class = Color.GREEN, Flags.READ | Flags.WRITE, Color
k_slotted, k_plain, k_child = Slotted(1, [2]), Plain(4), Child(5)
k_class, k_dataclass_class = Plain, Point
k_function, k_lambda = make_counter, lambda v: v * 3
k_closure = make_counter(10); k_closure()
k_bound_method = k_plain.double
k_staticmethod, k_classmethod, k_property = staticmethod(len), classmethod(len), property(len)
k_super = super(Child, k_child)
k_super_unbound = super(Child)
k_cached = functools.lru_cache(maxsize=8)(lambda v: v + 1)

k_dict_keyiter = iter(data); next(k_dict_keyiter)
k_dict_valueiter = iter(data.values()); next(k_dict_valueiter)
k_dict_itemiter = iter(data.items()); next(k_dict_itemiter); next(k_dict_itemiter)
k_dict_reversed = reversed(data); next(k_dict_reversed)
k_dict_reversed_items = reversed(data.items()); next(k_dict_reversed_items)
k_dict_keys, k_dict_values, k_dict_items = data.keys(), data.values(), data.items()
k_odict_iter = iter(ordered); next(k_odict_iter)
k_odict_items_iter = iter(ordered.items()); next(k_odict_items_iter)
k_odict_reversed = reversed(ordered); next(k_odict_reversed)
k_set_iter = iter(letters); k_set_first = next(k_set_iter)
k_list_iter = iter(numbers_); next(k_list_iter)
k_list_reversed = reversed(numbers_); next(k_list_reversed)
k_tuple_iter = iter((1, 2, 3)); next(k_tuple_iter)
k_range_iter = iter(range(10)); next(k_range_iter); next(k_range_iter)
k_str_iter = iter("hello"); next(k_str_iter)
k_bytes_iter = iter(b"xyz"); next(k_bytes_iter)
k_enumerate = enumerate("abc"); next(k_enumerate)
k_zip = zip([1, 2, 3], "abc"); next(k_zip)
k_map = map(abs, [-1, -2, -3]); next(k_map)
k_filter = filter(None, [0, 1, 2, 0, 3]); next(k_filter)
k_count = itertools.count(5, 2); next(k_count)
k_cycle = itertools.cycle("ab"); next(k_cycle)
k_generator = (i * i for i in range(5))
k_generator_function_made = make_counter(0)

k_bytesio = io.BytesIO(b"0123456789"); k_bytesio.seek(4)
k_stringio = io.StringIO("line one\nline two\n"); k_stringio.readline()
k_closed_bytesio = io.BytesIO(b"gone"); k_closed_bytesio.close()
k_file_read = open("in.txt"); k_file_read.readline()
k_file_read_binary = open("in.txt", "rb"); k_file_read_binary.read(3)
k_file_write = open("out.txt", "w"); k_file_write.write("written before\n")
k_file_write_binary = open("out.bin", "wb"); k_file_write_binary.write(b"\x01\x02")
k_file_append = open("appended.txt", "a"); k_file_append.write("new line\n")
k_file_readwrite = open("in.txt", "r+"); k_file_readwrite.read(6)
k_file_unbuffered = open("in.txt", "rb", buffering=0); k_file_unbuffered.read(2)
k_file_closed = open("in.txt"); k_file_closed.close()
k_tempfile = tempfile.TemporaryFile("w+"); k_tempfile.write("temporary"); k_tempfile.seek(2)
k_stdout, k_stderr = sys.stdout, sys.stderr
k_text_over_bytes = io.TextIOWrapper(io.BytesIO(b"first\nsecond\n"), encoding="utf-8"); k_text_over_bytes.readline()
k_buffered_over_bytes = io.BufferedReader(io.BytesIO(b"xyz")); k_buffered_over_bytes.read(1)
k_pretty_printer = pprint.PrettyPrinter(width=40, stream=sys.stdout)
k_tar_read = tarfile.open("archive.tar")
k_tar_write = tarfile.open("new.tar", "w")
k_tar_info = k_tar_read.getmember("member.txt")
k_zip_read = zipfile.ZipFile("archive.zip")
k_tar_closed, k_zip_closed = t, z

k_logger = logging.getLogger("registry.kinds")
for _h in list(k_logger.handlers):
    k_logger.removeHandler(_h)
k_logger.setLevel(logging.INFO)
k_logger.propagate = False
k_stream_handler = logging.StreamHandler(sys.stdout)
k_stream_handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
k_stderr_handler = logging.StreamHandler()
k_file_handler = logging.FileHandler("run.log", mode="w")
k_file_handler.setLevel(logging.WARNING)
for _h in (k_stream_handler, k_file_handler):
    k_logger.addHandler(_h)
k_logger.warning("before the checkpoint")
k_root_logger = logging.getLogger()
k_logger_adapter = logging.LoggerAdapter(k_logger, {"run": 1})
k_formatter = logging.Formatter("%(asctime)s %(message)s")
k_log_record = logging.LogRecord("n", logging.INFO, "p.py", 3, "msg %s", ("x",), None)
k_log_record.created = k_log_record.msecs = k_log_record.relativeCreated = 0
k_log_record.process = k_log_record.thread = 0
k_null_handler = logging.NullHandler()

k_weakref = weakref.ref(k_plain)
k_weak_proxy = weakref.proxy(k_child)
k_weak_callable_proxy = weakref.proxy(k_function)
k_weak_method = weakref.WeakMethod(k_plain.double)
k_weak_values = weakref.WeakValueDictionary({"plain": k_plain})
k_weak_keys = weakref.WeakKeyDictionary({k_child: "child"})
k_weak_set = weakref.WeakSet([k_plain, k_child])
_doomed = Plain(0)
k_dead_weakref, k_dead_proxy = weakref.ref(_doomed), weakref.proxy(_doomed)
del _doomed
_orphan = Plain(-1)
k_weakref_to_unsaved = weakref.ref(_orphan)
"""

LIBRARIES = r"""
import numpy as np, pandas as pd, torch, scipy.sparse, scipy.stats, networkx as nx
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.pipeline import make_pipeline
from sklearn.tree import DecisionTreeClassifier
from sklearn.model_selection import KFold

rng = np.random.default_rng(0)
X = rng.normal(size=(40, 3)); y = (X[:, 0] > 0).astype(int)
torch.manual_seed(0)

k_ndarray, k_ndarray_big = np.arange(12.0).reshape(3, 4), np.linspace(0, 1, 20_000)
k_np_int, k_np_float, k_np_bool = np.int32(7), np.float64(2.5), np.bool_(True)
k_np_structured = np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])
k_np_masked = np.ma.masked_array([1, 2, 3], mask=[0, 1, 0])
k_np_dtype, k_np_ufunc = np.dtype("float32"), np.add
k_np_generator, k_np_random_state = np.random.default_rng(5), np.random.RandomState(6)
k_np_datetime = np.datetime64("2024-01-02")
k_dataframe = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}, index=[10, 20, 30])
k_series = pd.Series([1.5, 2.5], name="s")
k_categorical = pd.Categorical(["a", "b", "a"])
k_index, k_range_index = pd.Index(["i", "j"]), pd.RangeIndex(0, 6, 2)
k_timestamp, k_timedelta = pd.Timestamp("2024-03-01 12:00"), pd.Timedelta("1h")
k_period, k_interval = pd.Period("2024-03", freq="M"), pd.Interval(0, 1)
k_multiindex = pd.MultiIndex.from_tuples([("a", 1), ("b", 2)])
k_tensor, k_tensor_int = torch.randn(3, 4), torch.arange(6).reshape(2, 3)
k_tensor_grad = torch.ones(2, requires_grad=True)
k_parameter = torch.nn.Parameter(torch.zeros(3))
k_module = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
k_optimizer = torch.optim.SGD(k_module.parameters(), lr=0.1, momentum=0.9)
k_module(torch.ones(2, 3)).sum().backward(); k_optimizer.step()
k_torch_dtype, k_torch_device, k_torch_size = torch.float16, torch.device("cpu"), torch.Size([2, 3])
k_torch_generator = torch.Generator().manual_seed(3)
k_scaler = StandardScaler().fit(X)
k_logistic = LogisticRegression().fit(X, y)
k_pipeline = make_pipeline(StandardScaler(), DecisionTreeClassifier(random_state=0)).fit(X, y)
k_unfitted = LogisticRegression(C=0.5)
k_kfold = KFold(n_splits=3)
k_sparse_csr = scipy.sparse.csr_matrix(np.eye(3))
k_sparse_coo = scipy.sparse.coo_array(np.eye(2))
k_frozen_dist = scipy.stats.norm(loc=1, scale=2)
k_graph = nx.Graph([(1, 2), (2, 3)]); k_graph.nodes[1]["color"] = "red"
k_digraph = nx.DiGraph([("a", "b")])
k_figure, k_axes = plt.subplots()
k_line, = k_axes.plot([1, 2, 3], [3, 1, 2], label="line")
k_axes.set_title("registry")
"""

BATCHES = {"stdlib": STDLIB, "libraries": LIBRARIES}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ATOMS = (type(None), bool, int, float, complex, str, bytes)


def _masked(text: str) -> str:
    return _ADDRESS.sub(" at 0x?", text)


def _sorted(items: list[Any]) -> list[Any]:
    return sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=str))


def _name_of(target: Any, ns: dict[str, Any]) -> str:
    """The variable that holds ``target`` itself, or its type when none does."""
    return next((n for n, v in ns.items() if v is target and n.startswith("k_")), f"<{type(target).__qualname__}>")


def _referent_of_proxy(proxy: Any, ns: dict[str, Any]) -> str:
    try:
        proxy.__class__  # noqa: B018
    except ReferenceError:
        return "dead"
    held = (n for n, v in ns.items() if n.startswith("k_") and any(r is proxy for r in _weakrefs(v)))
    return next(held, "<unknown>")


def _weakrefs(value: Any) -> list[Any]:
    try:
        return weakref.getweakrefs(value)
    except TypeError:
        return []


def _file(f: Any) -> dict[str, Any]:
    raw = getattr(getattr(f, "buffer", f), "raw", getattr(f, "buffer", f))
    name = getattr(raw, "name", None)
    out: dict[str, Any] = {"closed": f.closed}
    if f.closed:
        return out
    out["name"] = os.path.basename(name) if isinstance(name, str) else "<anonymous>"
    out["mode"], out["position"] = getattr(f, "mode", None), f.tell()
    if f.readable():
        out["next"] = _jsonable(f.read(8))
    if f.writable():
        f.write(b"<X>" if "b" in str(out["mode"]) else "<X>")
        f.flush()
        if isinstance(name, str):
            with open(name, "rb") as again:
                out["content"] = again.read().decode()
    return out


def _buffer(b: Any) -> dict[str, Any]:
    if b.closed:
        return {"closed": True}
    return {"value": _jsonable(b.getvalue()), "position": b.tell(), "next": _jsonable(b.read(4))}


def _stream(stream: Any) -> str:
    for name in ("stdout", "stderr"):
        if stream is getattr(sys, name):
            return name
    if isinstance(getattr(stream, "name", None), str):
        return os.path.basename(stream.name)
    return type(stream).__qualname__


def _handler(h: logging.Handler) -> dict[str, Any]:
    out = {"type": type(h).__qualname__, "level": h.level, "format": getattr(h.formatter, "_fmt", None)}
    if isinstance(h, logging.FileHandler):
        out["file"], out["mode"] = os.path.basename(h.baseFilename), h.mode
    elif isinstance(h, logging.StreamHandler):
        out["stream"] = _stream(h.stream)
    return out


def _logger(logger: logging.Logger) -> dict[str, Any]:
    return {
        "name": logger.name,
        "level": logger.level,
        "propagate": logger.propagate,
        "handlers": [_handler(h) for h in logger.handlers if h.name != "pytest-capture"]
        if not isinstance(logger, logging.RootLogger)
        else "root",
        "registered": logging.getLogger(None if isinstance(logger, logging.RootLogger) else logger.name) is logger,
    }


def _jsonable(x: Any, depth: int = 0, seen: frozenset[int] = frozenset()) -> Any:
    """A JSON value that two equal objects share, in any process (addresses masked)."""
    if isinstance(x, float) and x != x:
        return "nan"
    if type(x) in (type(None), bool, int, str):
        return x
    if isinstance(x, (*_ATOMS, enum.Enum)):
        return repr(x)
    if id(x) in seen or depth > 6:
        return "<cycle or deep>"
    seen = seen | {id(x)}
    if type(x) in (list, tuple):
        return [_jsonable(i, depth + 1, seen) for i in x]
    if type(x) in (set, frozenset):
        return _sorted([_jsonable(i, depth + 1, seen) for i in x])
    if type(x) is dict:
        return _sorted([[_jsonable(k, depth + 1, seen), _jsonable(v, depth + 1, seen)] for k, v in x.items()])
    library = _library(x)
    if library is not None:
        return library
    text = repr(x)
    if " at 0x" not in text and not text.startswith("<"):
        return _masked(text)
    state = getattr(x, "__dict__", None)
    if state is None and hasattr(type(x), "__slots__"):
        state = {s: getattr(x, s, "<unset>") for s in type(x).__slots__}
    if isinstance(state, dict) and state:
        return {"type": type(x).__qualname__, "state": _jsonable(dict(state), depth + 1, seen)}
    return _masked(text)


def _library(x: Any) -> Any:
    """Values of the scientific libraries, by what they hold."""
    module = type(x).__module__.split(".")[0]
    if module == "numpy" and hasattr(x, "tolist") and hasattr(x, "dtype"):
        return {"dtype": str(x.dtype), "value": _masked(repr(x.tolist())), "type": type(x).__name__}
    if module == "torch" and hasattr(x, "tolist") and hasattr(x, "dtype"):
        return {"dtype": str(x.dtype), "value": x.detach().tolist(), "grad": x.requires_grad}
    if module == "torch" and hasattr(x, "state_dict"):
        return {"state": _masked(repr(x.state_dict())), "repr": _masked(repr(x))}
    if module == "pandas" and hasattr(x, "to_dict"):
        return _masked(repr(x.to_dict()) + repr(getattr(x, "dtypes", "")))
    if module == "scipy" and hasattr(x, "toarray"):
        return x.toarray().tolist()
    if module == "scipy" and hasattr(x, "mean"):
        return [float(x.mean()), float(x.std())]
    if module == "networkx":
        return [_sorted([[str(n), d] for n, d in x.nodes(data=True)]), _sorted([[str(a), str(b)] for a, b in x.edges])]
    if module == "sklearn":
        fitted = {k: _masked(repr(v)) for k, v in sorted(vars(x).items()) if k.endswith("_") and not k.startswith("_")}
        return {"params": _masked(repr(x.get_params())), "fitted": fitted}
    if module == "matplotlib" and hasattr(x, "get_axes"):
        return [[a.get_title(), [line.get_xydata().tolist() for line in a.get_lines()]] for a in x.get_axes()]
    if module == "matplotlib" and hasattr(x, "get_lines"):
        return [x.get_title(), [line.get_xydata().tolist() for line in x.get_lines()]]
    if module == "matplotlib" and hasattr(x, "get_xydata"):
        return [x.get_label(), x.get_xydata().tolist(), x.axes.get_title() if x.axes else None]
    return None


def _iterator(it: Any) -> list[Any]:
    return [_jsonable(item) for item in itertools.islice(it, 12)]


def observe(x: Any, ns: dict[str, Any]) -> Any:
    """What a user would notice about ``x`` (may consume it: iterators, files)."""
    try:
        return _observe(x, ns)
    except Exception as e:  # what raises is part of what a user sees
        return f"raises {type(e).__name__}: {_masked(str(e))}"


def _observe(x: Any, ns: dict[str, Any]) -> Any:
    kind = type(x)
    if kind is weakref.ReferenceType:
        target = x()
        return "dead" if target is None else _name_of(target, ns)
    if kind in (weakref.ProxyType, weakref.CallableProxyType):
        return _referent_of_proxy(x, ns)
    if isinstance(x, weakref.WeakMethod):
        return [_name_of(x().__self__, ns), x()()]
    if isinstance(x, (weakref.WeakValueDictionary, weakref.WeakKeyDictionary)):
        return _sorted([[_name_of(k, ns), _name_of(v, ns)] for k, v in x.items()])
    if isinstance(x, weakref.WeakSet):
        return sorted(_name_of(v, ns) for v in x)
    if kind is super:
        return [x.__thisclass__.__qualname__, _name_of(x.__self__, ns) if x.__self__ is not None else None]
    if isinstance(x, (io.BytesIO, io.StringIO)):
        return _buffer(x)
    if isinstance(x, io.IOBase) and x in (sys.stdout, sys.stderr):
        return _stream(x)
    if isinstance(x, io.IOBase):
        return _file(x)
    if isinstance(x, logging.Logger):
        return _logger(x)
    if isinstance(x, logging.Handler):
        return _handler(x)
    if isinstance(x, logging.LoggerAdapter):
        return [_logger(x.logger), x.extra]
    if type(x).__qualname__ == "PrettyPrinter":
        return [_stream(x._stream), x._width]
    if type(x).__qualname__ == "TarFile":
        names = [m.name for m in x.members]
        return names + ([x.extractfile("member.txt").read().decode()] if x.mode == "r" and not x.closed else [x.mode])
    if type(x).__qualname__ == "ZipFile":
        return [x.namelist(), x.read("member.txt").decode() if x.fp is not None else x.mode]
    if isinstance(x, types.FunctionType):
        return {"qualname": x.__qualname__, "defaults": _jsonable(x.__defaults__), "call": _call(x)}
    if isinstance(x, type):
        return [
            x.__qualname__,
            [c.__qualname__ for c in x.__mro__],
            sorted(k for k in vars(x) if not k.startswith("__")),
        ]
    if kind is type(iter(set())):
        return sorted(_iterator(x))  # a set's order is not kept from one process to the next
    if hasattr(x, "__next__") and iter(x) is x:
        return _iterator(x)
    if isinstance(x, types.MethodType):
        return [x.__func__.__qualname__, _name_of(x.__self__, ns), x()]
    return _jsonable(x)


def _call(f: Any) -> Any:
    for args in ((), (3,)):
        try:
            result = f(*args)
        except TypeError:
            continue
        return _jsonable(result() if callable(result) else result)
    return "not called"
