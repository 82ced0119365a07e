// The series page: hover/focus tooltips, click or Enter opens a commit, zoom and pan by asking
// the server for another window of the same chart, and controls that swap the chart in place
// (no reload). The chart itself is SVG drawn by the server (app/web/chart_svg.py).
"use strict";
(function () {
  const form = document.getElementById("series-controls");
  const area = document.getElementById("chart-area");
  const tooltip = document.getElementById("tooltip");
  if (!form || !area || !tooltip) return;

  function svg() { return area.querySelector("svg.series-chart"); }

  function query(range) {
    const params = new URLSearchParams(new FormData(form));
    if (range) {
      params.set("from", String(range[0]));
      params.set("to", String(range[1]));
    }
    if (!params.get("baseline")) params.delete("baseline");
    return params;
  }

  let pending = null;
  async function load(range) {
    const params = query(range);
    if (pending) pending.abort();
    pending = new AbortController();
    area.setAttribute("aria-busy", "true");
    try {
      const response = await fetch(form.dataset.chartUrl + "?" + params, {signal: pending.signal});
      const body = await response.text();
      if (!response.ok) {
        area.replaceChildren(problem(response.status, body));
        return;
      }
      area.innerHTML = body;
      const chart = svg();
      if (chart) {
        document.getElementById("from").value = chart.dataset.from;
        document.getElementById("to").value = chart.dataset.to;
        params.set("from", chart.dataset.from);
        params.set("to", chart.dataset.to);
      }
      history.replaceState(null, "", form.dataset.pageUrl + "?" + params);
      bind();
    } catch (error) {
      if (error.name !== "AbortError") area.replaceChildren(problem(0, String(error)));
    } finally {
      area.removeAttribute("aria-busy");
    }
  }

  function problem(status, body) {
    const box = document.createElement("p");
    box.className = "banner regression";
    const doc = new DOMParser().parseFromString(body, "text/html");
    const detail = doc.querySelector("p");
    box.textContent = (status ? status + ": " : "") + (detail ? detail.textContent : body.slice(0, 300));
    return box;
  }

  function range() {
    const chart = svg();
    if (!chart) return null;
    return {from: +chart.dataset.from, to: +chart.dataset.to, min: +chart.dataset.min, max: +chart.dataset.max};
  }

  function clamp(from, to, r) {
    const span = to - from;
    if (from < r.min) { from = r.min; to = Math.min(r.max, from + span); }
    if (to > r.max) { to = r.max; from = Math.max(r.min, to - span); }
    return [Math.round(from), Math.round(to)];
  }

  function zoom(factor) {
    const r = range();
    if (!r) return;
    const middle = (r.from + r.to) / 2;
    const half = Math.max(2, (r.to - r.from) * factor / 2);
    load(clamp(middle - half, middle + half, r));
  }

  function pan(direction) {
    const r = range();
    if (!r) return;
    const shift = Math.max(1, Math.round((r.to - r.from) / 2)) * direction;
    load(clamp(r.from + shift, r.to + shift, r));
  }

  function show(point) {
    const d = point.dataset;
    tooltip.replaceChildren();
    const head = document.createElement("strong");
    head.textContent = d.platform + " · " + d.sha.slice(0, 10) + " (#" + d.position + ")";
    const message = document.createElement("div");
    message.textContent = d.summary || "(no message)";
    const value = document.createElement("div");
    value.textContent = "median " + d.value + " · samples " + d.samples;
    tooltip.append(head, message, value);
    tooltip.hidden = false;
    const box = point.getBoundingClientRect();
    tooltip.style.left = Math.min(window.innerWidth - 320, box.right + window.scrollX + 8) + "px";
    tooltip.style.top = (box.top + window.scrollY - 8) + "px";
  }

  function hide() { tooltip.hidden = true; }

  function open(point) { window.location.href = "/commits/" + point.dataset.sha; }

  function toPosition(chart, clientX) {
    const box = chart.getBoundingClientRect();
    const scale = box.width / chart.viewBox.baseVal.width;
    const left = +chart.dataset.left * scale;
    const width = +chart.dataset.plotWidth * scale;
    const from = +chart.dataset.from;
    const span = Math.max(1, +chart.dataset.to - from);
    return from - 0.5 + (clientX - box.left - left) / width * (span + 1);
  }

  function bind() {
    const chart = svg();
    if (!chart) return;
    for (const point of chart.querySelectorAll(".point")) {
      point.addEventListener("mouseenter", () => show(point));
      point.addEventListener("mouseleave", hide);
      point.addEventListener("focus", () => show(point));
      point.addEventListener("blur", hide);
      point.addEventListener("click", () => open(point));
      point.addEventListener("keydown", (event) => { if (event.key === "Enter") open(point); });
    }
    const selection = chart.querySelector(".selection");
    let start = null;
    chart.addEventListener("mousedown", (event) => {
      if (event.target.classList.contains("point")) return;
      start = event.clientX;
      event.preventDefault();
      window.addEventListener("mouseup", finish, {once: true});
    });
    chart.addEventListener("mousemove", (event) => {
      if (start === null) return;
      const box = chart.getBoundingClientRect();
      const scale = chart.viewBox.baseVal.width / box.width;
      const a = (Math.min(start, event.clientX) - box.left) * scale;
      const b = (Math.max(start, event.clientX) - box.left) * scale;
      selection.setAttribute("x", a.toFixed(1));
      selection.setAttribute("y", "0");
      selection.setAttribute("width", (b - a).toFixed(1));
      selection.setAttribute("height", String(chart.viewBox.baseVal.height));
    });
    function finish(event) {
      if (start === null) return;
      const a = toPosition(chart, Math.min(start, event.clientX));
      const b = toPosition(chart, Math.max(start, event.clientX));
      start = null;
      selection.setAttribute("width", "0");
      const r = range();
      if (r && b - a >= 1) load(clamp(Math.ceil(a), Math.floor(b), r));
    }
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); load(null); });
  form.addEventListener("change", (event) => {
    // A new metric, platform set, branch or scale keeps the window; the baseline waits for Enter.
    if (event.target.name === "baseline") return;
    const r = range();
    load(r ? [r.from, r.to] : null);
  });
  document.getElementById("zoom-in").addEventListener("click", () => zoom(0.5));
  document.getElementById("zoom-out").addEventListener("click", () => zoom(2));
  document.getElementById("pan-left").addEventListener("click", () => pan(-1));
  document.getElementById("pan-right").addEventListener("click", () => pan(1));
  document.getElementById("reset").addEventListener("click", () => {
    const r = range();
    if (r) load([r.min, r.max]);
  });
  bind();
})();
