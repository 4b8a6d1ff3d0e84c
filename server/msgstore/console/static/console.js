// Write actions ask first: a form with data-confirm is sent only once confirmed, and carries
// confirm=yes so the console can tell (it refuses an unconfirmed action).
document.addEventListener("submit", (ev) => {
  const form = ev.target;
  const question = form.dataset.confirm;
  if (!question) return;
  if (!window.confirm(question)) { ev.preventDefault(); return; }
  form.elements.confirm.value = "yes";
});

// Plots: each .plot[data-series] polls its series (the session's own samples) and redraws.
window.msgstorePlots = {};
function startPlot(el) {
  const name = el.dataset.series;
  let plot = null;
  async function refresh() {
    try {
      const res = await fetch("/api/series?name=" + encodeURIComponent(name), { credentials: "same-origin" });
      if (!res.ok) return;
      const data = await res.json();
      const xs = data.points.map((p) => p[0]);
      const ys = data.points.map((p) => p[1]);
      window.msgstorePlots[name] = data.points;
      el.dataset.points = String(data.points.length);
      if (!plot) {
        plot = new uPlot({ width: 800, height: 240, series: [{}, { label: el.dataset.label || name, stroke: "#3d6fd6", width: 2 }], axes: [{}, {}] }, [xs, ys], el);
      } else {
        plot.setData([xs, ys]);
      }
    } catch (e) { /* the next refresh tries again */ }
  }
  refresh();
  setInterval(refresh, 2000);
}
document.addEventListener("DOMContentLoaded", () => document.querySelectorAll(".plot[data-series]").forEach(startPlot));
