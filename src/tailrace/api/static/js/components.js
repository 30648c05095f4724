// Pieces several pages show: a run's tasks with their states, and the DAG's graph.

import { badge, countsBar, h, num, s } from "./dom.js";
import { taskHref } from "./links.js";

const NODE_W = 230;
const NODE_H = 54;
const GAP_X = 80; // between layers; wider when edge labels need the room
const GAP_Y = 22;
const LABEL_CHAR = 6.5; // an 11px label's width per character, near enough
const LABEL_PAD = 8; // each side of a label's text, inside its box
const LABEL_GAP_MAX = 240; // labels longer than fits end in "…" (their <title> is whole)

const GROUP_HEAD = 24; // room for a task group's label above its first row
const GROUP_FOOT = 10;
const GROUP_PAD = 14; // a group's box reaches this far beyond its nodes, per nesting level

const mappedLabel = { expand: "mapped", iterate: "iterate" };

// A task id that may wrap after the dots of its groups ("transform.<wbr>check").
export const breakable = (taskId) => taskId.split(".").flatMap((part, i) => (i ? [".", h("wbr"), part] : [part]));

// One row per task: its state, or for a mapped task its instances per state.
export function taskTable(dagId, runId, summaries, structure) {
  const info = Object.fromEntries((structure?.tasks ?? []).map((t) => [t.task_id, t]));
  return h(
    "table",
    { className: "table tasks", id: "task-table" },
    h("thead", {}, h("tr", {}, h("th", {}, "Task"), h("th", {}, "State"), h("th", { className: "right" }, "Instances"))),
    h(
      "tbody",
      {},
      summaries.map((t) => {
        const kind = info[t.task_id]?.mapped;
        return h(
          "tr",
          { dataset: { task: t.task_id } },
          h(
            "td",
            {},
            h("a", { href: taskHref(dagId, runId, t.task_id) }, breakable(t.task_id)),
            kind ? h("span", { className: `kind kind-${kind}` }, mappedLabel[kind]) : null,
            info[t.task_id]?.starts_in_triggerer ? h("span", { className: "kind kind-trigger" }, "triggerer") : null,
          ),
          h("td", { className: "state-cell" }, kind ? countsBar(t.counts) : badge(t.state)),
          h("td", { className: "right" }, kind ? num(t.total) : ""),
        );
      }),
    ),
  );
}

// Where rows and groups go: each group adds a label band above its first row and a margin
// below its last, so nested boxes never overlap their nodes or each other.
function geometry(structure, gapX) {
  const groups = structure.groups ?? [];
  const maxDepth = Math.max(-1, ...groups.map((g) => g.depth)) + 1;
  const rowY = (row) =>
    16 +
    row * (NODE_H + GAP_Y) +
    GROUP_HEAD * groups.filter((g) => g.first_row <= row).length +
    GROUP_FOOT * groups.filter((g) => g.last_row < row).length;
  const layerX = (layer) => 16 + maxDepth * GROUP_PAD + layer * (NODE_W + gapX);
  const boxes = groups.map((g) => {
    // Groups nested in this one that start (or end) on the same row sit inside its margin.
    const nested = (key) => groups.filter((o) => o[key] === g[key] && o.depth > g.depth).length;
    const pad = (maxDepth - g.depth) * GROUP_PAD;
    const top = rowY(g.first_row) - GROUP_HEAD * (1 + nested("first_row")) + 2;
    const bottom = rowY(g.last_row) + NODE_H + GROUP_FOOT * (1 + nested("last_row")) - 2;
    const left = layerX(g.first_layer) - pad;
    const right = layerX(g.last_layer) + NODE_W + pad;
    return { group: g, x: left, y: top, width: right - left, height: bottom - top };
  });
  const layers = Math.max(0, ...structure.tasks.map((t) => t.layer)) + 1;
  const rows = Math.max(0, ...structure.tasks.map((t) => t.row)) + 1;
  return {
    at: (t) => [layerX(t.layer), rowY(t.row)],
    boxes,
    width: layerX(layers - 1) + NODE_W + 16 + maxDepth * GROUP_PAD,
    height: rowY(rows - 1) + NODE_H + 16 + GROUP_FOOT * groups.filter((g) => g.last_row === rows - 1).length,
  };
}

const labelWidth = (text) => text.length * LABEL_CHAR + 2 * LABEL_PAD;

// The gap between layers: room for the widest edge label and some edge either side of it.
function layerGap(edges) {
  const widest = Math.max(0, ...edges.filter((e) => e.label).map((e) => labelWidth(e.label)));
  return Math.min(LABEL_GAP_MAX, Math.max(GAP_X, widest + 24));
}

// Edge labels, each on its edge where no node is (a gap between layers, or the lane of an
// edge that skips layers) and cut with "…" when the gap is too narrow for it: at the first
// of its edge's spots that no label placed before takes. Labels with fewer spots go first.
function edgeLabels(jobs, gapX) {
  const room = Math.floor((gapX - 24 - 2 * LABEL_PAD) / LABEL_CHAR);
  const placed = [];
  const overlaps = (a) => placed.some((b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + 18 && b.y < a.y + 18);
  return [...jobs]
    .sort((a, b) => a.spots.length - b.spots.length)
    .map(({ edge, spots }) => {
      const text = edge.label.length > room ? `${edge.label.slice(0, room - 1)}…` : edge.label;
      const w = labelWidth(text);
      const boxes = spots.map(([x, y]) => ({ x: x - w / 2, y: y - 9, w }));
      const spot = boxes.find((c) => !overlaps(c)) ?? boxes[0];
      placed.push(spot);
      return s(
        "g",
        { className: "edge-label", dataset: { edge: `${edge.source_id} → ${edge.target_id}` } },
        s("title", {}, `${edge.source_id} → ${edge.target_id}: ${edge.label}`),
        s("rect", { x: spot.x, y: spot.y, width: w, height: 18, rx: 9 }),
        s("text", { x: spot.x + w / 2, y: spot.y + 13, "text-anchor": "middle" }, text),
      );
    });
}

// How an edge runs, as an SVG path, and the spots (x, y) its label may take, best first.
// Between neighbouring layers, one curve. An edge that skips layers and would cross a node
// on the way runs instead along a lane in the gap under those nodes, curving out of its
// source and into its target; its label goes on that lane.
function route(up, t, at, tasks, gapX) {
  const [x1, y1] = at(up);
  const [x2, y2] = at(t);
  const [sx, sy, ex, ty] = [x1 + NODE_W, y1 + NODE_H / 2, x2 - 6, y2 + NODE_H / 2];
  const step = NODE_W + gapX;
  const gap = (layer) => x1 + NODE_W + (layer - up.layer - 1) * step + gapX / 2; // before ``layer``
  const [lo, hi] = [Math.min(sy, ty), Math.max(sy, ty)];
  const blocking = tasks.filter((o) => o.layer > up.layer && o.layer < t.layer && at(o)[1] <= hi && at(o)[1] + NODE_H >= lo);
  if (!blocking.length) {
    const mid = (sx + x2) / 2;
    const curve = bezierY(sx, sy, mid, ex, ty);
    const gaps = [t.layer];
    for (let layer = up.layer + 1; layer < t.layer; layer += 1) gaps.push(layer);
    return { d: `M${sx},${sy} C${mid},${sy} ${mid},${ty} ${ex},${ty}`, spots: gaps.map((l) => [gap(l), curve(gap(l))]) };
  }
  const lane = Math.max(...blocking.map((o) => at(o)[1] + NODE_H)) + GAP_Y / 2;
  const [a, b] = [sx + gapX, x2 - gapX]; // where the lane begins and ends
  const out = bezierY(sx, sy, sx + gapX / 2, a, lane);
  const into = bezierY(b, lane, b + gapX / 2, ex, ty);
  const over = [];
  for (let layer = up.layer + 1; layer < t.layer; layer += 1) over.push([x1 + (layer - up.layer) * step + NODE_W / 2, lane]);
  return {
    d: `M${sx},${sy} C${sx + gapX / 2},${sy} ${sx + gapX / 2},${lane} ${a},${lane} L${b},${lane} C${b + gapX / 2},${lane} ${b + gapX / 2},${ty} ${ex},${ty}`,
    spots: [...over, [gap(t.layer), into(gap(t.layer))], [gap(up.layer + 1), out(gap(up.layer + 1))]],
    lane,
  };
}

// The y of a cubic Bézier from (x0,y0) to (x3,y3) with controls (m,y0) and (m,y3), at x:
// its x grows with t, so t is found by halving.
function bezierY(x0, y0, m, x3, y3) {
  const at = (t, a, b, c, d) => (1 - t) ** 3 * a + 3 * (1 - t) ** 2 * t * b + 3 * (1 - t) * t ** 2 * c + t ** 3 * d;
  return (x) => {
    let [lo, hi] = [0, 1];
    for (let i = 0; i < 30; i += 1) {
      const mid = (lo + hi) / 2;
      if (at(mid, x0, m, m, x3) < x) lo = mid;
      else hi = mid;
    }
    return at(lo, y0, y0, y3, y3);
  };
}

// The DAG as an SVG, left to right in the server's layers; task groups as labelled boxes;
// nodes coloured by the run's states, a mapped node with a bar of its instances per state;
// edges with their labels.
export function graph(structure, summaries, dagId, runId) {
  const byId = Object.fromEntries(structure.tasks.map((t) => [t.task_id, t]));
  const gapX = layerGap(structure.edges);
  const { at, boxes, width, height } = geometry(structure, gapX);
  const edges = [];
  const labelled = [];
  let bottom = height;
  for (const edge of structure.edges) {
    const [up, t] = [byId[edge.source_id], byId[edge.target_id]];
    if (!up || !t) continue;
    const { d, spots, lane } = route(up, t, at, structure.tasks, gapX);
    if (lane) bottom = Math.max(bottom, lane + 14);
    const streaming = t.mapped === "iterate" && t.iterate_sources.includes(up.task_id);
    edges.push(s("path", { className: streaming ? "edge streaming" : "edge", d, "marker-end": "url(#arrow)" }));
    if (edge.label) labelled.push({ edge, spots });
  }
  const groups = boxes.map(({ group, x, y, width: w, height: hgt }) =>
    s(
      "g",
      { className: `group depth-${group.depth % 3}`, dataset: { group: group.group_id } },
      s("title", {}, `task group ${group.group_id}`),
      s("rect", { className: "group-box", x, y, width: w, height: hgt, rx: 10 }),
      s("text", { className: "group-label", x: x + 10, y: y + 16 }, `▣ ${group.label}`),
    ),
  );
  const nodes = structure.tasks.map((t) => {
    const [x, y] = at(t);
    const summary = summaries?.[t.task_id];
    const state = summary?.state ?? "none";
    // Inside a group the box names the group: the node shows the task's own part.
    const own = t.task_group && t.task_id.startsWith(`${t.task_group}.`) ? t.task_id.slice(t.task_group.length + 1) : t.task_id;
    const label = own.length > 24 ? `${own.slice(0, 23)}…` : own;
    const sub = [t.operator_name, t.mapped ? `${mappedLabel[t.mapped]}${summary ? ` ×${num(summary.total)}` : ""}` : null, t.starts_in_triggerer ? "triggerer" : null].filter(Boolean).join(" · ");
    const link = runId ? taskHref(dagId, runId, t.task_id) : null;
    const node = s(
      "g",
      { className: `node st-${state}`, transform: `translate(${x},${y})`, dataset: { task: t.task_id } },
      s("title", {}, `${t.task_id} (${t.operator_name}): ${state === "none" ? "no status" : state}`),
      s("rect", { className: "frame", width: NODE_W, height: NODE_H, rx: 8 }),
      s("rect", { className: "band", width: 6, height: NODE_H, rx: 3 }),
      s("text", { x: 16, y: 22, className: "label" }, label),
      s("text", { x: 16, y: 40, className: "sub" }, sub),
      t.mapped && summary ? miniBar(summary.counts, summary.total) : null,
    );
    return link ? s("a", { href: link }, node) : node;
  });
  return s(
    "svg",
    { className: "graph", viewBox: `0 0 ${width} ${bottom}`, width, height: bottom, id: "graph" },
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 6, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", className: "arrowhead" }))),
    groups,
    edges,
    nodes,
    edgeLabels(labelled, gapX),
  );
}

const ORDER = ["success", "running", "deferred", "queued", "scheduled", "up_for_retry", "failed", "upstream_failed", "skipped", "removed", "none"];

function miniBar(counts, total) {
  let x = 16;
  const width = NODE_W - 28;
  const parts = [];
  for (const state of ORDER) {
    if (!counts[state]) continue;
    const w = (counts[state] / Math.max(total, 1)) * width;
    parts.push(s("rect", { className: `seg st-${state}`, x, y: NODE_H - 9, width: Math.max(w, 1), height: 4 }));
    x += w;
  }
  return s("g", {}, parts);
}
