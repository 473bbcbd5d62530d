// Building the page without innerHTML: every text the member sends (keys, values, errors) goes
// into text nodes, so nothing stored in the store can run as script in the console.

/** An element: h("a", {href: "/ui/keys", class: "nav"}, "Keys", child, ...). */
export function h(tag, properties, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(properties || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      element.className = value;
    } else if (name === "value") {
      element.value = value;
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces everything in `element` with `children`. */
export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A message box: kind is "error", "warning" or "info". */
export function notice(kind, ...children) {
  return h("div", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, ...children);
}

/** A definition list from [term, description] pairs. */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([term, description]) => [h("dt", {}, term), h("dd", {}, description)]));
}

/** A table with a header row. Rows are arrays of cells, or {cells, class, attributes}. */
export function table(headings, rows, properties = {}) {
  return h("table", properties,
    h("thead", {}, h("tr", {}, headings.map((heading) => h("th", { scope: "col" }, heading)))),
    h("tbody", {}, rows.map((row) => {
      const { cells, class: rowClass, attributes } = Array.isArray(row) ? { cells: row } : row;
      return h("tr", { class: rowClass, ...(attributes || {}) }, cells.map((cell) => h("td", {}, cell)));
    })));
}

/** A link inside the console: the router handles it without reloading the page. */
export function link(href, ...children) {
  return h("a", { href, "data-link": true }, ...children);
}

/** The console's address of a page with its parameters, such as page("history", {key: "a"}). */
export function page(name, parameters = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(parameters)) {
    if (value !== undefined && value !== null && value !== "") query.set(key, value);
  }
  const text = query.toString();
  return `/ui/${name}${text ? `?${text}` : ""}`;
}
