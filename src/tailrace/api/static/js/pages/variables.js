// Variables: every stored variable with its value (masked when the key looks like a
// secret's) and description; admins add or change one with the form and delete with ✕.
// TAILRACE_VAR_<KEY> environment variables live in the processes that read them, not here.

import { api, p } from "../api.js";
import { empty, h, replace } from "../dom.js";

export async function render(root, _params, _query, ctx) {
  document.title = "Variables · Tailrace";
  const table = h("div", { className: "card" }, h("p", { className: "muted pad" }, "Loading …"));
  const message = h("div", { id: "variable-message" });
  root.append(h("div", { className: "page-head" }, h("h1", {}, "Variables")), message);
  if (ctx.isAdmin) root.append(form(load, message));
  root.append(table);

  async function load() {
    const items = [];
    let cursor = null;
    do {
      const page = await api(`/variables?limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor && items.length < 5000);
    replace(table, items.length ? variableTable(items, ctx, load, message) : empty("No variables yet", "Add one here, with ", h("code", {}, "tailrace variables set KEY VALUE"), ", or in a task with ", h("code", {}, "Variable.set"), "."));
  }
  await load();
}

function form(reload, message) {
  const key = h("input", { id: "variable-key", placeholder: "key", required: true, pattern: "[A-Za-z0-9_.\\-]+" });
  const value = h("textarea", { id: "variable-value", placeholder: "value (text or JSON)", rows: 1 });
  const description = h("input", { id: "variable-description", placeholder: "description (optional)" });
  const save = async (event) => {
    event.preventDefault();
    const body = { value: value.value, description: description.value || null };
    try {
      try {
        await api("/variables", { method: "POST", body: { key: key.value, ...body } });
      } catch (error) {
        if (error.status !== 409) throw error;
        await api(p`/variables/${key.value}`, { method: "PATCH", body });
      }
      replace(message, h("div", { className: "notice" }, `Variable ${key.value} saved.`));
      key.value = value.value = description.value = "";
      await reload();
    } catch (error) {
      replace(message, h("div", { className: "error" }, error.message));
    }
  };
  return h("form", { className: "card pad variable-form", id: "variable-form", onsubmit: save }, key, value, description, h("button", { type: "submit" }, "Save"));
}

function variableTable(items, ctx, reload, message) {
  return h(
    "table",
    { className: "table", id: "variable-table" },
    h("thead", {}, h("tr", {}, ["Key", "Value", "Description", ""].map((c) => h("th", {}, c)))),
    h(
      "tbody",
      {},
      items.map((v) =>
        h(
          "tr",
          { dataset: { key: v.key } },
          h("td", {}, h("code", {}, v.key)),
          h("td", {}, h("code", { className: v.value === "***" ? "muted" : "" }, v.value)),
          h("td", { className: "muted" }, v.description ?? ""),
          h(
            "td",
            { className: "narrow right" },
            ctx.isAdmin
              ? h("button", {
                  className: "ghost small",
                  title: `Delete ${v.key}`,
                  onclick: async () => {
                    if (!confirm(`Delete variable ${v.key}?`)) return;
                    try {
                      await api(p`/variables/${v.key}`, { method: "DELETE" });
                      replace(message, h("div", { className: "notice" }, `Variable ${v.key} deleted.`));
                      await reload();
                    } catch (error) {
                      replace(message, h("div", { className: "error" }, error.message));
                    }
                  },
                }, "✕")
              : null,
          ),
        ),
      ),
    ),
  );
}
