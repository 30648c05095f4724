// Assets: each asset with its producers, consumers and latest event, and a graph of the
// DAGs they link (producer DAG → asset → consumer DAG), laid out in layers left to right.

import { api } from "../api.js";
import { empty, h, num, replace, s, when } from "../dom.js";
import { dagHref } from "../links.js";

export async function render(root) {
  document.title = "Assets · Tailrace";
  const [assets, links] = await Promise.all([api("/assets?limit=1000"), api("/assets/graph")]);
  root.append(
    h("div", { className: "page-head" }, h("h1", {}, "Assets")),
    h("p", { className: "muted" }, "Data tasks update (outlets) and DAGs scheduled on it wait for."),
    h("h2", {}, "DAGs linked by assets"),
    h("div", { className: "card graph-card" }, links.nodes.length ? assetGraph(links) : empty("No links yet", "A DAG with an asset in a task's outlets, or scheduled on one, appears here.")),
    h("h2", {}, "All assets"),
    h("div", { className: "card" }, assetTable(assets.items)),
  );
}

function assetTable(items) {
  if (!items.length) return empty("No assets yet", "Name an Asset in a DAG's schedule or a task's outlets.");
  const dagLinks = (ids) => ids.map((id, i) => [i ? ", " : "", h("a", { href: dagHref(id.split(".")[0]) }, id)]);
  return h(
    "table",
    { className: "table", id: "asset-table" },
    h("thead", {}, h("tr", {}, ["Asset", "Events", "Last event", "Producers", "Consumers"].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      items.map((a) =>
        h(
          "tr",
          { dataset: { asset: a.name } },
          h("td", {}, h("strong", {}, a.name), a.uri !== a.name ? h("div", { className: "muted small" }, h("code", {}, a.uri)) : null),
          h("td", { className: "right" }, num(a.events)),
          h("td", {}, a.last_event_at ? when(a.last_event_at) : "–"),
          h("td", {}, dagLinks(a.producers)),
          h("td", {}, dagLinks(a.consumers)),
        ),
      ),
    ),
  );
}

const W = 196;
const H = 40;
const GAP_X = 40;
const GAP_Y = 18;

// Layers by longest path (Kahn's order: a node sits right of everything feeding it); a
// cycle (a DAG feeding an asset it consumes) is broken where it is found.
function layers(nodes, edges) {
  const out = new Map(nodes.map((n) => [n.id, []]));
  const indegree = new Map(nodes.map((n) => [n.id, 0]));
  for (const e of edges) {
    out.get(e.source).push(e.target);
    indegree.set(e.target, indegree.get(e.target) + 1);
  }
  const layer = new Map(nodes.map((n) => [n.id, 0]));
  const placed = new Set();
  const pending = new Set(nodes.map((n) => n.id));
  while (pending.size) {
    let ready = [...pending].filter((id) => indegree.get(id) === 0);
    if (!ready.length) ready = [pending.values().next().value]; // a cycle
    for (const id of ready) {
      pending.delete(id);
      placed.add(id);
      for (const next of out.get(id)) {
        if (placed.has(next)) continue;
        layer.set(next, Math.max(layer.get(next), layer.get(id) + 1));
        indegree.set(next, indegree.get(next) - 1);
      }
    }
  }
  // A source with nothing feeding it (an asset only events from outside update) sits just
  // left of its first consumer, not far away in the first column.
  for (const n of nodes) {
    const targets = out.get(n.id);
    if (!edges.some((e) => e.target === n.id) && targets.length) {
      layer.set(n.id, Math.max(0, Math.min(...targets.map((t) => layer.get(t))) - 1));
    }
  }
  return layer;
}

function assetGraph({ nodes, edges }) {
  const layer = layers(nodes, edges);
  const columns = [];
  for (const n of nodes) (columns[layer.get(n.id)] ??= []).push(n);
  const at = new Map();
  columns.forEach((col, i) => col.forEach((n, j) => at.set(n.id, [20 + i * (W + GAP_X), 20 + j * (H + GAP_Y)])));
  const width = 40 + columns.length * (W + GAP_X) - GAP_X;
  const height = 40 + Math.max(...columns.map((c) => c.length)) * (H + GAP_Y) - GAP_Y;
  const paths = edges.map((e) => {
    const [x1, y1] = at.get(e.source);
    const [x2, y2] = at.get(e.target);
    const sx = x1 + W;
    const sy = y1 + H / 2;
    const ty = y2 + H / 2;
    const mid = (sx + x2) / 2;
    return s("path", { className: "edge", d: `M${sx},${sy} C${mid},${sy} ${mid},${ty} ${x2 - 6},${ty}`, "marker-end": "url(#asset-arrow)" });
  });
  const boxes = nodes.map((n) => {
    const [x, y] = at.get(n.id);
    const label = n.label.length > 25 ? `${n.label.slice(0, 24)}…` : n.label;
    const box = s(
      "g",
      { className: `asset-node kind-${n.kind}`, transform: `translate(${x},${y})`, dataset: { node: n.id } },
      s("title", {}, `${n.kind === "dag" ? "DAG" : "asset"} ${n.label}`),
      s("rect", { className: "frame", width: W, height: H, rx: n.kind === "asset" ? 20 : 8 }),
      s("text", { x: 14, y: 17, className: "kind" }, n.kind === "dag" ? "DAG" : "asset"),
      s("text", { x: 14, y: 32, className: "label" }, label),
    );
    return n.kind === "dag" ? s("a", { href: dagHref(n.label) }, box) : box;
  });
  return s(
    "svg",
    { className: "graph asset-graph", viewBox: `0 0 ${width} ${height}`, width, height, id: "asset-graph" },
    s("defs", {}, s("marker", { id: "asset-arrow", viewBox: "0 0 10 10", refX: 6, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, s("path", { d: "M0,0 L10,5 L0,10 z", className: "arrowhead" }))),
    paths,
    boxes,
  );
}

// What an asset-scheduled DAG's next run still waits for (for the DAG page's head).
export async function waitingPanel(dagId) {
  let waiting;
  try {
    waiting = await api(`/dags/${encodeURIComponent(dagId)}/assets/waiting`);
  } catch {
    return null; // not scheduled on assets
  }
  // The condition with each asset marked ✓ (an event is queued) or … (waiting).
  const part = (c, top = false) => {
    if (c.kind === "all" || c.kind === "any") {
      const inner = c.args.map((a, i) => [i ? ` ${c.kind === "all" ? "&" : "|"} ` : "", part(a)]);
      return top ? inner : ["(", inner, ")"];
    }
    const name = c.kind === "alias" ? `alias ${c.name}` : c.name;
    return h("span", { className: c.met ? "asset-met" : "asset-missing", title: c.met ? "an event is queued" : "waiting for an event" }, c.met ? "✓ " : "… ", name);
  };
  return h(
    "div",
    { className: "card pad asset-waiting", id: "asset-waiting" },
    h("strong", {}, waiting.missing.length ? "Waiting for " : "Ready: the next run starts now"),
    waiting.missing.length ? h("span", {}, waiting.missing.join(", ")) : null,
    h("div", { className: "small" }, "Condition: ", part(waiting.condition, true)),
    h("div", { className: "muted small" }, `${num(waiting.queued_events)} event${waiting.queued_events === 1 ? "" : "s"} queued`, waiting.last_asset_triggered_run_at ? [" · last asset-triggered run ", when(waiting.last_asset_triggered_run_at)] : ""),
  );
}
