"""The fidelity corpus across libraries: notebook code that builds a few typical objects of each
library the way its documentation shows, and what the next cell of a notebook does with them.

``BATCHES`` maps a batch name to a ``Batch``: ``build`` runs as a cell (``__name__ ==
"__main__"``) in an empty folder; ``probes`` hold, per variable, an expression a next cell would
evaluate, whose JSON-able value is what the user would notice: a figure's JSON, a frame's rows, a
model's predictions, a study's next sampled parameters, a WCS's pixel to world conversion, a
tokenizer's ids. ``probe`` evaluates them in order (one may change an object: a study asks a new
trial), each on its own, so a variable the checkpoint named and did not save fails only its own.
Batches group libraries to keep the number of processes down.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

import xxhash


@dataclass(frozen=True)
class Batch:
    """Libraries checkpointed and resumed together: their build cell and the next cell's probes."""

    libraries: tuple[str, ...]
    build: str
    probes: dict[str, str] = field(default_factory=dict)


def probe(batch: Batch, namespace: dict[str, Any]) -> dict[str, Any]:
    """Evaluate ``batch``'s probes in ``namespace`` (with this module's helpers), in order: per
    variable, the JSON of what it showed, or what it raised."""
    scope = {**HELPERS, **namespace}
    seen: dict[str, Any] = {}
    for name, expression in batch.probes.items():
        try:
            seen[name] = jsonable(eval(expression, scope))  # the corpus's own probes, never user input
        except Exception as e:  # what raises is part of what a user sees
            seen[name] = f"raises {type(e).__name__}: {e}"
    return seen


def fingerprint(data: Any) -> str:
    """A short digest of bytes or an array's bytes, for probes of images and pixels."""
    if hasattr(data, "tobytes"):
        data = data.tobytes()
    return xxhash.xxh3_64_hexdigest(bytes(data))


def pixels(figure: Any) -> str:
    """What a matplotlib figure draws: the digest of its rendered pixels (Agg)."""
    figure.canvas.draw()
    return fingerprint(figure.canvas.buffer_rgba())


def jsonable(value: Any) -> Any:
    """``value`` through JSON, numbers rounded to 10 significant digits (NumPy scalars included)."""

    def default(x: Any) -> Any:
        if hasattr(x, "tolist"):
            return x.tolist()
        return str(x)

    def rounded(x: Any) -> Any:
        if isinstance(x, float):
            return float(f"{x:.10g}")
        if isinstance(x, list):
            return [rounded(i) for i in x]
        if isinstance(x, dict):
            return {k: rounded(v) for k, v in x.items()}
        return x

    return rounded(json.loads(json.dumps(value, default=default)))


_BOKEH_ID = re.compile(r'"(p\d+)"')


def bokeh_json(model: Any) -> str:
    """A bokeh model's document JSON with model ids renumbered in order of first appearance:
    ids are handed out by a per-process counter, so two equal figures built in two processes
    differ only there."""
    from bokeh.document import Document

    doc = Document()
    doc.add_root(model)
    text = json.dumps(doc.to_json(), sort_keys=True)
    doc.remove_root(model)
    numbers: dict[str, str] = {}
    return _BOKEH_ID.sub(lambda m: '"' + numbers.setdefault(m.group(1), f"id{len(numbers)}") + '"', text)


def png_bytes() -> bytes:
    """A small PNG file's bytes, made here (no downloads)."""
    from PIL import Image

    image = Image.new("RGB", (6, 4), (10, 20, 30))
    image.putpixel((1, 1), (200, 100, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def next_params(study: Any) -> list[Any]:
    """The parameters a study's sampler proposes next (it asks a new trial, as a next cell would)."""
    trial = study.ask()
    return [trial.suggest_float("x", -10, 10), trial.suggest_categorical("kind", ["a", "b"])]


#: What a probe may call besides the build cell's names.
HELPERS = {f.__name__: f for f in (fingerprint, pixels, jsonable, bokeh_json, next_params)}


# -- plotting: plotly, bokeh, altair, seaborn --------------------------------------------------

PLOTTING = Batch(
    libraries=("plotly", "bokeh", "altair", "seaborn"),
    build=r"""
import numpy as np, pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import plotly.graph_objects as go, plotly.express as px
from bokeh.plotting import figure
from bokeh.models import ColumnDataSource, HoverTool
import altair as alt
import seaborn as sns

frame = pd.DataFrame({"x": [1, 2, 3, 4, 5, 6], "y": [2.0, 1.5, 3.5, 2.5, 4.0, 3.0], "g": list("ababab")})

fig = go.Figure(data=go.Bar(x=[1, 2, 3], y=[4, 5, 6]))
fig.update_layout(title="bars")
scatter = px.scatter(frame, x="x", y="y", color="g")

plot = figure(title="t")
r = plot.line([1, 2], [3, 4])
source = ColumnDataSource(data={"x": [1, 2, 3], "y": [3, 1, 2]})
plot_source = figure(title="from a source", x_axis_label="x")
dots = plot_source.scatter("x", "y", source=source, size=8)
plot_source.add_tools(HoverTool(tooltips=[("y", "@y")]))

chart = alt.Chart(frame).mark_point().encode(x="x", y="y", color="g")
layered = chart + alt.Chart(frame).mark_line().encode(x="x", y="y")

sns.set_theme(style="whitegrid")
grid = sns.FacetGrid(frame, col="g")
grid.map(plt.scatter, "x", "y")
hist_ax = sns.histplot(frame, x="y", bins=3)
palette = sns.color_palette("husl", 3)
""",
    probes={
        "fig": "fig.add_scatter(x=[1, 2, 3], y=[6, 5, 4]).to_json()",
        "scatter": "scatter.update_traces(marker_size=12).to_json()",
        "plot": "bokeh_json(plot)",
        "r": "[r.glyph.x, r.glyph.y, r.data_source.data, r in plot.renderers]",
        "source": "[source.stream({'x': [4], 'y': [5]}), source.data]",
        "plot_source": "bokeh_json(plot_source)",
        "dots": "[dots.data_source is source, dots in plot_source.renderers, dots.glyph.size]",
        "chart": "chart.to_json()",
        "layered": "layered.properties(title='layers').to_json()",
        "grid": "[grid.set_titles('{col_name}').col_names, pixels(grid.figure), "
        "[a.get_title() for a in grid.axes.flat]]",
        "hist_ax": "[pixels(hist_ax.figure), [p.get_height() for p in hist_ax.patches]]",
        "palette": "palette.as_hex()",
        "frame": "frame.to_json()",
    },
)

# -- data: polars, pyarrow, dask, arrow, networkx ----------------------------------------------

DATA = Batch(
    libraries=("polars", "pyarrow", "dask", "arrow", "networkx"),
    build=r"""
import datetime, os
import numpy as np, pandas as pd
import polars as pl
import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
import dask, dask.array as da, dask.dataframe as dd
import arrow
import networkx as nx

pl_frame = pl.DataFrame({"a": [1, 2, 3, 4], "b": ["x", "y", "x", "z"], "c": [0.5, 1.5, None, 3.0]})
pl_lazy = pl_frame.lazy().filter(pl.col("a") > 1).with_columns((pl.col("a") * 2).alias("d"))
pl_grouped = pl_frame.group_by("b", maintain_order=True).agg(pl.col("a").sum())
pl_series = pl.Series("s", [3, 1, 2])
pl_expr = (pl.col("a") + pl.col("c")).alias("sum")

pa_table = pa.table({"n": [1, 2, 3], "s": ["a", "b", None]}, metadata={"source": "corpus"})
pa_array = pa.array([1.5, None, 2.5])
pa_batch = pa.record_batch([pa.array([1, 2]), pa.array(["u", "v"])], names=["i", "t"])
pa_schema = pa.schema([("when", pa.timestamp("ms", tz="UTC")), ("k", pa.dictionary(pa.int8(), pa.string()))])
pa_chunked = pa.chunked_array([[1, 2], [3]])
pq.write_table(pa_table, "table.parquet")
pa_file = pq.ParquetFile("table.parquet")
# by its absolute path: the resume runs in another folder, which has no table.parquet
pl_scan = pl.scan_parquet(os.path.abspath("table.parquet")).select(pl.col("n").sum())

d_array = da.arange(24, chunks=5).reshape(4, 6)
d_sum = (d_array + 1).sum(axis=0)
d_frame = dd.from_pandas(pd.DataFrame({"k": list("abab"), "v": [1, 2, 3, 4]}), npartitions=2)
d_grouped = d_frame.groupby("k").v.sum()
d_delayed = dask.delayed(sum)([1, 2, 3])

when = arrow.get("2024-03-01T12:00:00+02:00")
later = when.shift(days=1, hours=3)
spans = list(arrow.Arrow.span_range("hour", when.datetime, when.shift(hours=2).datetime))
hours = arrow.Arrow.range("hour", when, limit=3)

karate = nx.karate_club_graph()
roads = nx.DiGraph()
roads.add_weighted_edges_from([("a", "b", 2.0), ("b", "c", 1.0), ("a", "c", 4.0)])
multi = nx.MultiGraph([(1, 2), (1, 2), (2, 3)])
""",
    probes={
        "pl_frame": "[pl_frame.to_dicts(), str(pl_frame.schema), pl_frame.filter(pl.col('b') == 'x').height]",
        "pl_lazy": "[pl_lazy.collect().to_dicts(), pl_lazy.explain()]",
        "pl_grouped": "pl_grouped.to_dicts()",
        "pl_series": "[pl_series.sort().to_list(), pl_series.name, str(pl_series.dtype)]",
        "pl_expr": "[pl_frame.select(pl_expr).to_dicts(), str(pl_expr)]",
        "pa_table": "[pa_table.to_pydict(), pa_table.schema.to_string(), pa_table.schema.metadata]",
        "pa_array": "[pa_array.to_pylist(), pc.sum(pa_array).as_py(), pa_array.null_count]",
        "pa_batch": "[pa_batch.to_pydict(), pa_batch.schema.to_string()]",
        "pa_schema": "[pa_schema.to_string(), str(pa_schema.field('k').type)]",
        "pa_chunked": "[pa_chunked.to_pylist(), pa_chunked.num_chunks]",
        "pa_file": "[pa_file.read().to_pydict(), pa_file.metadata.num_rows]",
        "pl_scan": "pl_scan.collect().to_dicts()",
        "d_array": "[d_array.compute(), d_array.chunks, d_array.name]",
        "d_sum": "[d_sum.compute(), d_sum.name]",
        "d_frame": "[d_frame.compute().to_dict(), d_frame.npartitions]",
        "d_grouped": "d_grouped.compute().sort_index().to_dict()",
        "d_delayed": "d_delayed.compute()",
        "when": "[when.isoformat(), when.to('UTC').isoformat(), when.humanize(later), when.format('dddd D MMMM')]",
        "later": "[later.isoformat(), later.weekday(), str(later.tzinfo)]",
        "spans": "[[a.isoformat(), b.isoformat()] for a, b in spans]",
        "hours": "[h.isoformat() for h in hours]",
        "karate": "[nx.shortest_path(karate, 0, 33), sorted(nx.pagerank(karate).items())[:5], karate.nodes[5], "
        "karate.graph]",
        "roads": "[nx.dijkstra_path(roads, 'a', 'c'), sorted(roads.edges(data=True))]",
        "multi": "[sorted(multi.edges(keys=True)), multi.number_of_edges(1, 2)]",
    },
)

# -- science: statsmodels, astropy, optuna, lightgbm, scikit-image, Pillow ---------------------

SCIENCE = Batch(
    libraries=("statsmodels", "astropy", "optuna", "lightgbm", "skimage", "PIL"),
    build=r"""
import io
import numpy as np, pandas as pd
import statsmodels.api as sm, statsmodels.formula.api as smf
import astropy.units as u
from astropy.table import QTable, Table
from astropy.wcs import WCS
from astropy.io import fits
from astropy.coordinates import SkyCoord
from astropy.time import Time
import optuna
import lightgbm as lgb
from skimage import draw, filters, measure, transform
from PIL import Image, ImageDraw, ImageFilter, ImageFont
from tests.support.libraries import png_bytes

rng = np.random.default_rng(0)
X = rng.normal(size=(60, 2))
y = 1.0 + X @ np.array([2.0, -1.0]) + rng.normal(scale=0.1, size=60)
table_frame = pd.DataFrame({"x": X[:, 0], "z": X[:, 1], "y": y})

ols = sm.OLS(y, sm.add_constant(X)).fit()
formula = smf.ols("y ~ x + z", data=table_frame).fit()
logit = sm.Logit((y + rng.normal(size=60) > 1).astype(float), sm.add_constant(X)).fit(disp=0)

speed = 3 * u.m / u.s
qtable = QTable({"name": ["a", "b"], "flux": [1.0, 2.0] * u.Jy})
table = Table({"id": [1, 2, 3], "mag": [10.5, 11.0, 12.25]}, meta={"origin": "corpus"})
indexed = Table({"id": [3, 1, 2], "band": ["g", "r", "i"], "mag": [10.5, 11.0, 12.25]})
indexed.add_index("id")
indexed.add_index("band", unique=True)
wcs = WCS(naxis=2)
wcs.wcs.crpix = [10.0, 20.0]
wcs.wcs.cdelt = [-0.066667, 0.066667]
wcs.wcs.crval = [0.0, -90.0]
wcs.wcs.ctype = ["RA---AIR", "DEC--AIR"]
wcs.wcs.set_pv([(2, 1, 45.0)])
header = fits.Header({
    "NAXIS": 2, "NAXIS1": 100, "NAXIS2": 50, "CTYPE1": "RA---TAN-SIP", "CTYPE2": "DEC--TAN-SIP",
    "CRPIX1": 50.0, "CRPIX2": 25.0, "CRVAL1": 150.0, "CRVAL2": 2.0, "CD1_1": -0.0002, "CD1_2": 0.0,
    "CD2_1": 0.0, "CD2_2": 0.0002, "A_ORDER": 2, "B_ORDER": 2, "A_2_0": 1e-5, "B_0_2": 2e-5,
    "DATE-OBS": "2024-01-01T00:00:00", "RADESYS": "ICRS",
})
wcs_sip = WCS(header)
hdu = fits.PrimaryHDU(np.arange(12.0).reshape(3, 4), header=wcs_sip.to_header())
star = SkyCoord(ra=10.68 * u.deg, dec=41.27 * u.deg, frame="icrs")
epoch = Time("2024-01-01T00:00:00", scale="utc")

optuna.logging.set_verbosity(optuna.logging.WARNING)
def objective(trial):
    x = trial.suggest_float("x", -10, 10)
    kind = trial.suggest_categorical("kind", ["a", "b"])
    return (x - 2) ** 2 + (kind == "b")
study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=3))
study.optimize(objective, n_trials=6)
random_study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
random_study.optimize(objective, n_trials=3)
memory_study = optuna.create_study(storage="sqlite:///:memory:", sampler=optuna.samplers.TPESampler(seed=2))
memory_study.optimize(objective, n_trials=2)
file_study = optuna.create_study(storage="sqlite:///study.db", sampler=optuna.samplers.TPESampler(seed=3))
file_study.optimize(objective, n_trials=3)

labels_y = (X[:, 0] > 0).astype(int)
train_set = lgb.Dataset(X, labels_y)
booster = lgb.train({"objective": "binary", "verbose": -1, "num_leaves": 4, "min_data_in_leaf": 5, "seed": 0},
                    train_set, num_boost_round=5)
regressor = lgb.LGBMRegressor(n_estimators=5, num_leaves=4, min_child_samples=5, verbose=-1).fit(X, y)

image = np.zeros((40, 40))
rr, cc = draw.disk((12, 12), 6)
image[rr, cc] = 1.0
rr, cc = draw.rectangle((25, 20), (34, 35))
image[rr, cc] = 0.5
smooth = filters.gaussian(image, sigma=1)
regions = measure.label(smooth > 0.2)
props = measure.regionprops(regions, intensity_image=image)
first_region = props[0]
tform = transform.AffineTransform(scale=(1.5, 0.5), rotation=0.3, translation=(2, 3))

picture = Image.new("RGB", (32, 24), (240, 240, 240))
ImageDraw.Draw(picture).rectangle((4, 4, 20, 16), fill=(200, 30, 30))
gray = picture.convert("L").filter(ImageFilter.BLUR)
font = ImageFont.load_default(size=12)
pen = ImageDraw.Draw(picture)
pen.text((2, 2), "hi", font=font, fill=(0, 0, 0))
loaded = Image.open(io.BytesIO(png_bytes()))
""",
    probes={
        "ols": "[ols.params, ols.bse, ols.rsquared, ols.predict(np.array([[1.0, 0.5, -0.5]])), ols.conf_int()]",
        "formula": "[formula.params.to_dict(), formula.predict(pd.DataFrame({'x': [1.0], 'z': [0.5]})).tolist()]",
        "logit": "[logit.params, logit.predict(np.array([[1.0, 0.5, -0.5]])), logit.prsquared]",
        "speed": "[speed.to(u.km / u.h).value, str(speed.unit), (speed * 2 * u.s).to_string()]",
        "qtable": "[qtable.pformat(), str(qtable['flux'].sum())]",
        "table": "[table.pformat(), dict(table.meta), table[table['mag'] > 10.8]['id'].tolist()]",
        "indexed": "[float(indexed.loc[2]['mag']), indexed.loc['band', 'r']['id'].item(), "
        "indexed.loc[1:2]['id'].tolist(), [i.id for i in indexed.indices]]",
        "wcs": "[wcs.wcs_pix2world([[0, 0], [24, 38], [45, 98]], 0), wcs.to_header_string(), "
        "wcs.world_axis_physical_types]",
        "wcs_sip": "[wcs_sip.all_pix2world([[1, 2], [60, 30]], 0), wcs_sip.all_world2pix([[150.0, 2.0]], 0), "
        "wcs_sip.pixel_shape, wcs_sip.calc_footprint(), str(wcs_sip.pixel_to_world(3, 4))]",
        "hdu": "[hdu.data, hdu.header.tostring()]",
        "star": "[star.ra.deg, star.separation(SkyCoord(ra=11 * u.deg, dec=41 * u.deg)).deg, star.galactic.l.deg]",
        "epoch": "[epoch.mjd, epoch.iso, (epoch + 1 * u.day).isot]",
        "study": "[study.best_params, [t.params for t in study.trials], next_params(study)]",
        "random_study": "[random_study.best_value, next_params(random_study)]",
        "memory_study": "[len(memory_study.trials), next_params(memory_study)]",
        "file_study": "[[t.params for t in file_study.trials], file_study.best_value, next_params(file_study)]",
        "objective": "objective.__name__",
        "booster": "[booster.predict(X[:5]), booster.num_trees(), "
        "booster.model_to_string().split('feature_importances')[0]]",
        "regressor": "[regressor.predict(X[:5]), regressor.get_params()]",
        "train_set": "[train_set.construct().num_data(), train_set.get_label()]",
        "image": "fingerprint(image)",
        "smooth": "fingerprint(smooth)",
        "regions": "[regions.max(), fingerprint(regions)]",
        "props": "[[p.label, p.area, p.centroid, p.bbox, p.intensity_mean] for p in props]",
        "first_region": "[first_region.area, first_region.eccentricity, first_region.coords[:3]]",
        "tform": "[tform([[1.0, 2.0]]), tform.params, tform.inverse([[3.0, 4.0]])]",
        "picture": "[picture.size, picture.mode, fingerprint(picture.tobytes()), picture.getpixel((5, 5))]",
        "gray": "[gray.mode, fingerprint(gray.resize((8, 6)).tobytes())]",
        "loaded": "[loaded.format, loaded.size, loaded.mode, fingerprint(loaded.convert('RGB').tobytes())]",
        "font": "[font.getbbox('hello'), font.size, font.getname()]",
        "pen": "[pen.text((10, 10), 'x', font=font), fingerprint(picture.tobytes())]",
    },
)

# -- astronomy: astropy's objects as a notebook reads them from FITS files ----------------------

ASTRONOMY = Batch(
    libraries=("astropy",),
    build=r"""
import warnings
import numpy as np
import astropy.units as u
from astropy.coordinates import SkyCoord
from astropy.io import fits
from astropy.table import QTable, Table
from astropy.time import Time
from astropy.wcs import WCS

warnings.simplefilter("ignore")  # astropy notes the DATE-OBS it turns into MJD-OBS
header = fits.Header({
    "CTYPE1": "RA---TAN-SIP", "CTYPE2": "DEC--TAN-SIP", "CRPIX1": 50.0, "CRPIX2": 25.0, "CRVAL1": 150.0,
    "CRVAL2": 2.0, "CD1_1": -0.0002, "CD1_2": 0.0, "CD2_1": 0.0, "CD2_2": 0.0002, "A_ORDER": 2, "B_ORDER": 2,
    "A_2_0": 1e-5, "B_0_2": 2e-5, "DATE-OBS": "2024-01-01T00:00:00", "RADESYS": "ICRS",
})
fits.PrimaryHDU(np.arange(5000, dtype=np.float32).reshape(50, 100), header=header).writeto("image.fits")
hdul = fits.open("image.fits")
image = hdul[0].data
wcs = WCS(hdul[0].header, hdul)
cutout = wcs[10:20, 5:15]
rotated = WCS(fits.Header({"CTYPE1": "RA---TAN", "CTYPE2": "DEC--TAN", "CRVAL1": 10.0, "CRVAL2": 20.0,
                           "CDELT1": -0.001, "CDELT2": 0.001, "CROTA2": 30.0}))

catalog = Table({"id": [1, 2, 3, 4], "band": ["g", "r", "g", "r"], "mag": [10.5, 11.0, 12.25, 9.0]})
catalog["flux"] = [1.0, 2.0, 3.0, 4.0] * u.Jy
catalog.write("catalog.fits")
from_fits = Table.read("catalog.fits")
by_band = from_fits.group_by("band")
flagged = Table({"x": [1, 2, 3]}, masked=True)
flagged["x"].mask = [True, False, False]
mag = catalog["mag"]
sources = QTable({"pos": SkyCoord([1, 2] * u.deg, [3, 4] * u.deg), "when": Time([60000, 60001], format="mjd"),
                  "dist": [1.0, 2.0] * u.pc})
""",
    probes={
        "hdul": "[hdul.info(output=False), hdul[0].header.tostring(), str(hdul[0].data.dtype)]",
        "image": "[str(image.dtype), image[:2, :3], fingerprint(image)]",
        "wcs": "[wcs.wcs.cd, str(wcs), wcs.all_pix2world([[1, 2], [60, 30]], 0), wcs.has_distortion]",
        "cutout": "[cutout.wcs.cd, str(cutout), cutout.all_pix2world([[1, 2]], 0)]",
        "rotated": "[rotated.wcs.crota, rotated.wcs.has_pc(), str(rotated), "
        "fingerprint(rotated.wcs_pix2world([[3.0, 4.0]], 0))]",
        "catalog": "catalog.pformat()",
        "mag": "[mag.__setitem__(0, 99.0), catalog['mag'].tolist()]",
        "from_fits": "[from_fits.pformat(), [str(from_fits[c].dtype) for c in from_fits.colnames]]",
        "by_band": "[by_band.groups.indices, by_band.groups.aggregate(np.mean).pformat()]",
        "flagged": "[flagged.masked, flagged.pformat()]",
        "sources": "[sources.pformat(), sources.write('sources.ecsv', overwrite=True), open('sources.ecsv').read()]",
    },
)

# -- text: a Hugging Face tokenizer, nltk, wordcloud -------------------------------------------

TEXT = Batch(
    libraries=("tokenizers", "nltk", "wordcloud"),
    build=r"""
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers, decoders
import numpy as np
from nltk import FreqDist, ConditionalFreqDist, Text, Tree, bigrams
from nltk.tokenize import RegexpTokenizer
from nltk.stem import PorterStemmer
from wordcloud import WordCloud

texts = [
    "the quick brown fox jumps over the lazy dog",
    "a lazy dog sleeps while the quick fox runs",
    "foxes and dogs are friends in the quick story",
]
tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
tokenizer.normalizer = normalizers.Lowercase()
tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer.decoder = decoders.BPEDecoder()
tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]", "[PAD]"]))
tokenizer.enable_padding(pad_id=1, pad_token="[PAD]", length=12)
encoding = tokenizer.encode("The quick dog")
from transformers import PreTrainedTokenizerFast
hf_tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]")

words = RegexpTokenizer(r"\w+").tokenize(" ".join(texts))
splitter = RegexpTokenizer(r"\w+|[^\w\s]+")
freq = FreqDist(words)
cond = ConditionalFreqDist((w[0], w) for w in words)
tree = Tree.fromstring("(S (NP (DT the) (NN fox)) (VP (VBZ jumps)))")
stemmer = PorterStemmer()
pairs = list(bigrams(words[:6]))
text = Text(words)

cloud = WordCloud(width=120, height=80, random_state=0, max_words=20).generate(" ".join(texts))
mask = np.zeros((80, 120), dtype=np.uint8)
mask[:, :30] = 255
masked_cloud = WordCloud(mask=mask, random_state=2, contour_width=1, colormap="viridis").generate(" ".join(texts))
""",
    probes={
        "tokenizer": "[[e.ids for e in tokenizer.encode_batch(['a quick fox', 'lazy dogs sleep'])], "
        "tokenizer.decode(tokenizer.encode('lazy fox').ids), tokenizer.get_vocab_size(), tokenizer.padding, "
        "tokenizer.to_str()]",
        "encoding": "[encoding.ids, encoding.tokens, encoding.attention_mask, encoding.offsets]",
        "hf_tokenizer": "[hf_tokenizer(['a lazy fox', 'the dog'], padding='longest')['input_ids'], "
        "hf_tokenizer.decode(hf_tokenizer.encode('quick dogs')), hf_tokenizer.pad_token_id, len(hf_tokenizer)]",
        "text": "[text.count('fox'), text.vocab().most_common(3), text.index('lazy')]",
        "splitter": "splitter.tokenize('hello, world!')",
        "freq": "[freq.most_common(5), freq.N(), freq.freq('the')]",
        "cond": "[sorted(cond.conditions()), cond['f'].most_common(2)]",
        "tree": "[tree.pformat(), tree.leaves(), tree.label(), str(tree[0, 1])]",
        "stemmer": "[stemmer.stem(w) for w in ('running', 'foxes', 'friends')]",
        "cloud": "[cloud.layout_, fingerprint(cloud.to_array()), "
        "fingerprint(cloud.recolor(random_state=3).to_array()), cloud.generate('a fox and a dog and a fox').layout_]",
        "masked_cloud": "[masked_cloud.to_svg(), masked_cloud.words_, fingerprint(masked_cloud.to_array()), "
        "masked_cloud.generate_from_frequencies({'fox': 3, 'dog': 1}).layout_]",
    },
)

BATCHES = {"plotting": PLOTTING, "data": DATA, "science": SCIENCE, "astronomy": ASTRONOMY, "text": TEXT}
