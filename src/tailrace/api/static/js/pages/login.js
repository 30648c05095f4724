import { api } from "../api.js";
import { errorBox, h, replace } from "../dom.js";

export async function render(root, _params, _query, ctx) {
  document.title = "Log in · Tailrace";
  const message = h("div");
  const username = h("input", { name: "username", id: "username", autocomplete: "username", required: true, autofocus: true });
  const password = h("input", { name: "password", id: "password", type: "password", autocomplete: "current-password", required: true });
  const form = h(
    "form",
    { className: "card login", onsubmit: submit },
    h("h1", {}, "Log in to Tailrace"),
    h("label", { for: "username" }, "Username"),
    username,
    h("label", { for: "password" }, "Password"),
    password,
    message,
    h("button", { type: "submit", className: "primary" }, "Log in"),
    h(
      "p",
      { className: "hint" },
      "Running ",
      h("code", {}, "tailrace standalone"),
      "? Log in as ",
      h("code", {}, "admin"),
      " with the password in ",
      h("code", {}, "$TAILRACE_HOME/standalone_admin_password.txt"),
      " (it printed where). More users: ",
      h("code", {}, "tailrace users create NAME --role viewer"),
      ".",
    ),
  );
  root.append(form);

  async function submit(event) {
    event.preventDefault();
    replace(message);
    try {
      const user = await api("/auth/session", {
        method: "POST",
        body: { username: username.value, password: password.value },
      });
      ctx.loggedIn(user);
    } catch (error) {
      replace(message, errorBox(error));
      password.select();
    }
  }
}
