// Pools: each pool's slots and how many its task instances take (a bar of running, queued
// and counted deferred slots over the pool's size); admins set and delete pools.

import { api, p } from "../api.js";
import { empty, errorBox, h, num, replace } from "../dom.js";

export async function render(root, _params, _query, ctx) {
  document.title = "Pools · Tailrace";
  const table = h("div", { className: "card" }, h("p", { className: "muted pad" }, "Loading …"));
  const message = h("div");
  const draw = async () => {
    const page = await api("/pools?limit=1000");
    replace(table, page.items.length ? poolTable(page.items, ctx, act) : empty("No pools yet", "The scheduler creates default_pool when it starts."));
  };
  const act = async (work) => {
    replace(message);
    try {
      await work();
      await draw();
    } catch (error) {
      replace(message, errorBox(error));
    }
  };
  root.append(
    h("div", { className: "page-head" }, h("h1", {}, "Pools")),
    h(
      "p",
      { className: "muted" },
      "A task with ",
      h("code", {}, 'pool="name"'),
      " takes pool_slots of the pool's slots while queued or running, and waits while too few are open.",
    ),
    message,
    table,
    ctx.isAdmin ? poolForm(act) : null,
  );
  await draw();
}

const NUMERIC = new Set(["Slots", "Running", "Queued", "Deferred", "Open"]);

function poolTable(pools, ctx, act) {
  return h(
    "table",
    { className: "table", id: "pool-table" },
    h(
      "thead",
      {},
      h("tr", {}, ["Pool", "Slots", "Used", "Running", "Queued", "Deferred", "Open", ""].map((c) => h("th", { className: NUMERIC.has(c) ? "right" : undefined }, c))),
    ),
    h(
      "tbody",
      {},
      pools.map((pool) =>
        h(
          "tr",
          { dataset: { pool: pool.name } },
          h("td", {}, h("strong", {}, pool.name), pool.description ? h("div", { className: "muted small" }, pool.description) : null),
          h("td", { className: "num" }, num(pool.slots)),
          h("td", {}, usageBar(pool)),
          h("td", { className: "num" }, num(pool.running_slots)),
          h("td", { className: "num" }, num(pool.queued_slots)),
          h("td", { className: "num" }, num(pool.deferred_slots), pool.include_deferred ? h("span", { className: "muted small", title: "Deferred task instances take slots in this pool" }, " counted") : null),
          h("td", { className: "num" }, num(pool.open_slots)),
          h(
            "td",
            { className: "narrow right" },
            ctx.isAdmin && pool.name !== "default_pool"
              ? h("button", { className: "ghost bad small", dataset: { delete: pool.name }, onclick: () => act(() => api(p`/pools/${pool.name}`, { method: "DELETE" })) }, "Delete")
              : null,
          ),
        ),
      ),
    ),
  );
}

function usageBar(pool) {
  const parts = [
    ["st-running", pool.running_slots],
    ["st-queued", pool.queued_slots],
    ["st-deferred", pool.include_deferred ? pool.deferred_slots : 0],
    ["st-none", Math.max(0, pool.open_slots)],
  ];
  return h(
    "div",
    { className: "counts" },
    h("div", { className: "countsbar", title: `${pool.occupied_slots} of ${pool.slots} slots in use` }, parts.filter(([, n]) => n > 0).map(([cls, n]) => h("span", { className: cls, style: `flex-grow:${n}` }))),
    h("div", { className: "legend" }, h("span", { className: "muted" }, `${num(pool.occupied_slots)} of ${num(pool.slots)} slots in use`)),
  );
}

function poolForm(act) {
  const name = h("input", { id: "pool-name", placeholder: "name", required: true, pattern: "[A-Za-z0-9_.\\-]+" });
  const slots = h("input", { id: "pool-slots", type: "number", min: "0", value: "1", required: true });
  const description = h("input", { id: "pool-description", placeholder: "what it is for (optional)" });
  const deferred = h("input", { id: "pool-include-deferred", type: "checkbox" });
  const form = h(
    "form",
    {
      className: "card toolbar",
      id: "pool-form",
      onsubmit: (event) => {
        event.preventDefault();
        act(() =>
          api(p`/pools/${name.value}`, {
            method: "PUT",
            body: { slots: Number(slots.value), description: description.value || null, include_deferred: deferred.checked },
          }),
        );
      },
    },
    h("strong", {}, "Set a pool"),
    name,
    slots,
    description,
    h("label", { className: "small" }, deferred, " deferred tasks take slots"),
    h("button", { className: "primary", type: "submit" }, "Save"),
  );
  return form;
}
