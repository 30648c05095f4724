// The shell: who is logged in, the header, and a hash router that gives each page a root
// element and stops its live streams when the page is left.

import { api, whenUnauthenticated } from "./api.js";
import { ago, h, replace } from "./dom.js";
import { pendingRequests } from "./hitl.js";
import * as actions from "./pages/actions.js";
import * as assets from "./pages/assets.js";
import * as dags from "./pages/dags.js";
import * as dag from "./pages/dag.js";
import * as login from "./pages/login.js";
import * as pools from "./pages/pools.js";
import * as run from "./pages/run.js";
import * as stream from "./pages/stream.js";
import * as task from "./pages/task.js";
import * as variables from "./pages/variables.js";

const ROUTES = [
  [/^\/login$/, login, []],
  [/^\/?$/, dags, []],
  [/^\/assets$/, assets, []],
  [/^\/required-actions$/, actions, []],
  [/^\/pools$/, pools, []],
  [/^\/variables$/, variables, []],
  [/^\/dags\/([^/]+)\/runs\/([^/]+)\/tasks\/([^/]+)$/, task, ["dagId", "runId", "taskId"]],
  [/^\/dags\/([^/]+)\/runs\/([^/]+)\/streams$/, stream, ["dagId", "runId"]],
  [/^\/dags\/([^/]+)\/runs\/([^/]+)$/, run, ["dagId", "runId"]],
  [/^\/dags\/([^/]+)(?:\/(grid|graph))?$/, dag, ["dagId", "tab"]],
];

const session = { user: null };
let cleanup = null;

export function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function parse() {
  const [path, query = ""] = location.hash.replace(/^#/, "").split("?");
  for (const [pattern, page, names] of ROUTES) {
    const match = pattern.exec(path);
    if (match) {
      const params = Object.fromEntries(names.map((n, i) => [n, match[i + 1] && decodeURIComponent(match[i + 1])]));
      return { page, params, query: new URLSearchParams(query) };
    }
  }
  return null;
}

function renderUser() {
  const user = document.getElementById("user");
  const nav = document.getElementById("nav");
  if (!session.user) {
    replace(user);
    replace(nav);
    return;
  }
  replace(nav, h("a", { href: "#/" }, "DAGs"), h("a", { href: "#/assets" }, "Assets"), h("a", { href: "#/required-actions", id: "nav-actions" }, "Required actions", h("span", { className: "nav-count", id: "nav-actions-count", hidden: true })), h("a", { href: "#/pools" }, "Pools"), h("a", { href: "#/variables" }, "Variables"), h("a", { href: "docs", target: "_blank" }, "API docs"));
  countWaiting();
  replace(
    user,
    h("span", { className: "who" }, session.user.username),
    h("span", { className: `role role-${session.user.role}` }, session.user.role),
    h("button", { className: "ghost", id: "logout", onclick: logout }, "Log out"),
  );
}

// How many human-in-the-loop requests wait, in the header: as of this page, or of the
// latest response given on it.
function countWaiting() {
  pendingRequests()
    .then((requests) => {
      const count = document.getElementById("nav-actions-count");
      count.hidden = !requests.length;
      replace(count, requests.length);
    })
    .catch(() => {});
}

async function logout() {
  await api("/auth/session", { method: "DELETE" });
  session.user = null;
  renderUser();
  navigate("#/login");
}

async function route() {
  if (cleanup) cleanup();
  cleanup = null;
  const root = document.getElementById("app");
  const found = parse();
  if (!found) {
    replace(root, h("div", { className: "empty" }, h("strong", {}, "No such page"), h("p", {}, h("a", { href: "#/" }, "Back to the DAGs"))));
    return;
  }
  if (found.page !== login && !session.user) {
    try {
      session.user = await api("/auth/me");
    } catch {
      sessionStorage.setItem("tailrace.after-login", location.hash);
      navigate("#/login");
      return;
    }
  }
  renderUser();
  replace(root);
  document.title = "Tailrace";
  const ctx = {
    user: session.user,
    isAdmin: session.user?.role === "admin",
    navigate,
    countWaiting,
    loggedIn(user) {
      session.user = user;
      renderUser();
      const next = sessionStorage.getItem("tailrace.after-login");
      sessionStorage.removeItem("tailrace.after-login");
      navigate(next && next !== "#/login" ? next : "#/");
    },
  };
  const stops = [];
  ctx.onLeave = (fn) => stops.push(fn);
  cleanup = () => stops.forEach((fn) => fn());
  try {
    await found.page.render(root, found.params, found.query, ctx);
  } catch (error) {
    root.append(h("div", { className: "error" }, error.message ?? String(error)));
  }
}

whenUnauthenticated(() => {
  session.user = null;
  if (!location.hash.startsWith("#/login")) {
    sessionStorage.setItem("tailrace.after-login", location.hash);
    navigate("#/login");
  }
});
window.addEventListener("hashchange", route);
// Relative times ("2 min ago") stay true while a page stays open.
setInterval(() => {
  for (const el of document.querySelectorAll("time[datetime]")) {
    if (el.getAttribute("datetime")) el.textContent = ago(el.getAttribute("datetime"));
  }
}, 10_000);
route();
