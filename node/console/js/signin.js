// The sign-in form, shown while auth is enabled and no one is signed in. The token it gets is
// kept in the page's memory only: reloading the page signs out.

import { call, describe, signIn } from "./api.js";
import { h, notice, replace } from "./dom.js";

export function renderSignIn(main, signedIn) {
  const name = h("input", { id: "signin-name", name: "name", autocomplete: "username", required: true });
  const password = h("input", { id: "signin-password", name: "password", type: "password", autocomplete: "current-password", required: true });
  const message = h("div", { "aria-live": "assertive" });
  const form = h("form", { class: "signin", "data-testid": "signin-form" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Auth is enabled on this cluster."),
    h("label", { for: "signin-name" }, "User"), name,
    h("label", { for: "signin-password" }, "Password"), password,
    h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Sign in")),
    message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const answer = await call("POST", "/v1/auth/authenticate", { body: { name: name.value, password: password.value } });
      signIn(name.value, answer.token);
      signedIn();
    } catch (error) {
      replace(message, notice("error", describe(error)));
    }
  });
  replace(main, form);
  name.focus();
}
