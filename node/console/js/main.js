// The console's entry: routes by the address (/ui/<page>?<parameters>, so every view can be
// shared and the back button works), shows who is signed in, and asks for a sign-in when auth is
// enabled and the member answers 401.

import { call, currentUser, get, signOut } from "./api.js";
import { h, replace } from "./dom.js";
import { renderSignIn } from "./signin.js";
import { renderCluster } from "./cluster.js";
import { renderKeys } from "./keys.js";
import { renderHistory } from "./history.js";
import { renderConflicts } from "./conflicts.js";
import { renderWatch } from "./watch.js";
import { renderLeases } from "./leases.js";

const PAGES = {
  cluster: renderCluster,
  keys: renderKeys,
  history: renderHistory,
  conflicts: renderConflicts,
  watch: renderWatch,
  leases: renderLeases,
};

const main = document.getElementById("main");
const account = document.getElementById("account");
let authEnabled = false;
// What the page shown now must stop (timers, streams) before another replaces it.
let stopCurrentPage = null;

function currentRoute() {
  const name = location.pathname.replace(/^\/ui\/?/, "").split("/")[0] || "cluster";
  return { name: PAGES[name] ? name : "cluster", parameters: new URLSearchParams(location.search) };
}

function stopPage() {
  if (stopCurrentPage) stopCurrentPage();
  stopCurrentPage = null;
}

/** Shows the page the address names. */
export function show() {
  stopPage();
  const { name, parameters } = currentRoute();
  for (const item of document.querySelectorAll("nav a[data-page]")) {
    if (item.dataset.page === name) item.setAttribute("aria-current", "page");
    else item.removeAttribute("aria-current");
  }
  document.title = `${name[0].toUpperCase()}${name.slice(1)} · revkv console`;
  if (authEnabled && !currentUser()) {
    renderSignIn(main, () => {
      renderAccount();
      show();
    });
    return;
  }
  replace(main);
  stopCurrentPage = PAGES[name](main, parameters, navigate) || null;
}

/** Goes to `address` inside the console, as a link would. */
export function navigate(address, { replaceEntry = false } = {}) {
  if (replaceEntry) history.replaceState(null, "", address);
  else history.pushState(null, "", address);
  show();
  main.focus({ preventScroll: true });
}

function renderAccount() {
  if (!authEnabled) {
    replace(account, h("span", {}, "auth disabled"));
    return;
  }
  const user = currentUser();
  if (!user) {
    replace(account, h("span", {}, "not signed in"));
    return;
  }
  replace(account,
    h("span", { "data-testid": "signed-in-user" }, `signed in as ${user}`),
    h("button", { type: "button", onclick: () => { signOut(); renderAccount(); show(); } }, "Sign out"));
}

document.addEventListener("click", (event) => {
  const anchor = event.target.closest("a[data-link]");
  if (!anchor || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(anchor.getAttribute("href"));
});
window.addEventListener("popstate", show);
// A token that stopped working (expired, user deleted): sign out and ask again. A 401 while no one
// is signed in is the sign-in form's own, which shows it itself.
window.addEventListener("revkv-unauthenticated", async () => {
  if (!authEnabled) {
    // Auth was enabled after the console opened: learn it, and ask for a sign-in.
    await learnAuthStatus();
    if (authEnabled) show();
    return;
  }
  if (!currentUser()) return;
  signOut();
  renderAccount();
  show();
});

async function learnAuthStatus() {
  try {
    const status = await get("/v1/auth/status");
    authEnabled = Boolean(status.enabled);
  } catch {
    authEnabled = false;
  }
  renderAccount();
}

async function start() {
  await learnAuthStatus();
  show();
}

// Exposed for the end-to-end test's checks of what the console holds, not used by the pages.
window.revkvConsole = { call };
start();
