// A small line chart in SVG, drawn from a member's own numbers (no charting library).

const NAMESPACE = "http://www.w3.org/2000/svg";

function svg(tag, attributes, ...children) {
  const element = document.createElementNS(NAMESPACE, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  for (const child of children) element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return element;
}

/** Lines over shared x values. `series` is [{name, class, values}], each `values` as long as
 *  `labels` (the x axis' texts). */
export function lineChart(labels, series, { width = 900, height = 220, title = "" } = {}) {
  const left = 48;
  const bottom = 24;
  const top = 10;
  const plotWidth = width - left - 10;
  const plotHeight = height - top - bottom;
  const highest = Math.max(1, ...series.flatMap((line) => line.values));
  const x = (index) => left + (labels.length <= 1 ? 0 : (index * plotWidth) / (labels.length - 1));
  const y = (value) => top + plotHeight - (value * plotHeight) / highest;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": title });
  chart.append(svg("title", {}, title));
  for (const fraction of [0, 0.5, 1]) {
    const value = highest * fraction;
    chart.append(svg("line", { class: "axis", x1: left, x2: left + plotWidth, y1: y(value), y2: y(value) }));
    chart.append(svg("text", { x: left - 6, y: y(value) + 4, "text-anchor": "end" }, Number.isInteger(value) ? value : value.toFixed(1)));
  }
  const step = Math.max(1, Math.ceil(labels.length / 6));
  labels.forEach((label, index) => {
    if (index % step === 0 || index === labels.length - 1) {
      chart.append(svg("text", { x: x(index), y: height - 6, "text-anchor": "middle" }, label));
    }
  });
  for (const line of series) {
    const points = line.values.map((value, index) => `${x(index).toFixed(1)},${y(value).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { class: line.class, points, "data-series": line.name }));
  }
  return chart;
}
