"""What a reader sees on a matplotlib figure, checked from its artists (issue 27: figures that
showed nothing). `problems(fig)` lists, per data axes, what a reader would miss:

- no visible mark: no data artist (a line of 2+ points or a marker, a scatter point, a bar,
  an image, a filled area) drawn inside the axes' limits at least one pixel wide and tall, and
  no message written on the axes (`ax.text`) — a blank panel;
- several series and no legend: 2+ data series of distinct colours (lines, scatters, bar
  groups, bar collections) on axes without a legend (nor a figure legend);
- a legend with no entry, and a colour bar without a label.

Reference lines (axhline / axvline: drawn in axes coordinates) are not data.
"""

from __future__ import annotations

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.collections import Collection
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

MIN_PIXELS = 1.0


def _inside(ax, bbox) -> bool:
  """The display-space box `bbox` overlaps the axes and is >= MIN_PIXELS wide and tall."""
  box = ax.bbox
  w = min(bbox.x1, box.x1) - max(bbox.x0, box.x0)
  h = min(bbox.y1, box.y1) - max(bbox.y0, box.y0)
  return w >= MIN_PIXELS and h >= MIN_PIXELS


def _points_inside(ax, xy) -> np.ndarray:
  """Which of the data points xy_X2 fall inside the axes' view limits."""
  xy = np.asarray(xy, float).reshape(-1, 2)
  (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
  ok = np.isfinite(xy).all(-1)
  return ok & (xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)


def _is_data(artist, ax) -> bool:
  return artist.get_visible() and artist.get_transform().contains_branch(ax.transData)


def _line_visible(ax, line: Line2D) -> bool:
  inside = _points_inside(ax, line.get_xydata())
  has_marker = line.get_marker() not in (None, "None", "", " ")
  if has_marker and inside.any():
    return True
  if line.get_linestyle() in ("None", "", " ") or inside.sum() < 1:
    return False
  return _inside(ax, line.get_window_extent()) or (
    inside.sum() >= 2 and line.get_window_extent().width + line.get_window_extent().height >= 1
  )


def marks(ax) -> int:
  """The number of visible data marks on ax (see the module docstring), messages included."""
  fig = ax.figure
  fig.canvas.draw()
  count = 0
  for line in ax.lines:
    count += _is_data(line, ax) and _line_visible(ax, line)
  for patch in ax.patches:  # bars, broken bars, filled polygons
    count += _is_data(patch, ax) and _inside(ax, patch.get_window_extent())
  for coll in ax.collections:
    if not coll.get_visible():
      continue
    offsets = np.asarray(coll.get_offsets())
    if len(offsets) and coll.get_offset_transform().contains_branch(ax.transData):
      count += int(_points_inside(ax, offsets).any())
    elif _is_data(coll, ax):  # polygons (broken bars, filled areas) in data coordinates
      count += any(_inside(ax, path.get_extents(coll.get_transform())) for path in coll.get_paths())
  for image in ax.images:
    count += isinstance(image, AxesImage) and _inside(ax, image.get_window_extent())
  count += sum(t.get_visible() and bool(t.get_text().strip()) for t in ax.texts)
  return count


def _colour(artist):
  if isinstance(artist, Line2D):
    c = artist.get_color()
  elif isinstance(artist, Collection):
    fc = artist.get_facecolor()
    c = fc[0] if len(fc) else artist.get_edgecolor()[0]
  else:
    c = artist.get_facecolor()
  return tuple(np.round(mcolors.to_rgba(c)[:3], 3))


def series(ax) -> set:
  """The colours of ax's data series: lines of 2+ points or with markers, scatters and
  collections, bar groups (one per container) and loose patches."""
  out = set()
  for line in ax.lines:
    if _is_data(line, ax) and len(line.get_xydata()) >= 1:
      out.add(_colour(line))
  for coll in ax.collections:
    if coll.get_visible() and (len(np.asarray(coll.get_offsets())) or len(coll.get_paths())):
      out.add(_colour(coll))
  in_containers = set()
  for cont in ax.containers:
    patches = [p for p in cont if isinstance(p, Patch)]
    if patches:
      out.add(_colour(patches[0]))
      in_containers.update(map(id, patches))
  for p in ax.patches:
    if id(p) not in in_containers and _is_data(p, ax):
      out.add(_colour(p))
  return out


def is_colorbar(ax) -> bool:
  return getattr(ax, "_colorbar", None) is not None or ax.get_label() == "<colorbar>"


def problems(fig) -> list[str]:
  """What a reader would miss on fig (module docstring); [] when nothing."""
  out = []
  figure_legend = bool(fig.legends)
  for i, ax in enumerate(fig.axes):
    name = f"axes {i} ({ax.get_title() or ax.get_xlabel() or ax.get_ylabel()!r})"
    if is_colorbar(ax):
      if not (ax.get_ylabel() or ax.get_xlabel()).strip():
        out.append(f"{name}: colour bar without a label")
      continue
    if not ax.get_visible() or not ax.axison:
      continue
    if marks(ax) == 0:
      out.append(f"{name}: no visible mark inside the axes")
    legend = ax.get_legend()
    if legend is not None and not legend.get_texts():
      out.append(f"{name}: empty legend")
    if len(series(ax)) >= 2 and legend is None and not figure_legend:
      out.append(f"{name}: {len(series(ax))} series and no legend")
  return out


def capture(monkeypatch) -> dict:
  """{figure name: problems(fig)} of every figure saved through gmlm.runs.RunDir.savefig
  while the monkeypatch holds."""
  from gmlm.runs import RunDir

  seen, original = {}, RunDir.savefig

  def savefig(self, fig, name):
    seen[name] = problems(fig)
    return original(self, fig, name)

  monkeypatch.setattr(RunDir, "savefig", savefig)
  return seen


def overlapping_tick_labels(ax, axis: str = "x") -> list[tuple[str, str]]:
  """Pairs of visible tick labels of one axis whose drawn boxes overlap."""
  ax.figure.canvas.draw()
  ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
  labels = [t for t in ticks if t.get_visible() and t.get_text().strip()]
  r = ax.figure.canvas.get_renderer()
  boxes = [(t.get_text(), t.get_window_extent(r)) for t in labels]
  return [(a, b) for i, (a, x) in enumerate(boxes) for b, y in boxes[i + 1 :] if x.overlaps(y)]
